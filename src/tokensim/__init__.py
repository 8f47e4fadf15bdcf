"""tokensim: predict, explain and plan how fast LLMs generate tokens on real hardware, and what it costs."""
from .deployment import Deployment, SpecDecode
from .errors import TokensimError
from .hardware.catalog import load_hardware
from .model.catalog import load_model
from .predictor import Prediction, predict, predict_deployment

__all__ = ["Deployment", "Prediction", "SpecDecode", "TokensimError", "load_hardware", "load_model",
           "predict", "predict_deployment"]
