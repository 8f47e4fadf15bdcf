"""tokensim: predict, explain and plan how fast LLMs generate tokens on real hardware, and what it costs."""
from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.errors import TokensimError
from tokensim.output.frames import to_pandas
from tokensim.prediction.predictor import Prediction, predict, predict_deployment
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.model.catalog import load_model

__all__ = ["Deployment", "Prediction", "SpecDecode", "TokensimError", "load_hardware", "load_model",
           "predict", "predict_deployment", "to_pandas"]
