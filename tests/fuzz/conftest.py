"""The fuzz suite writes nothing outside pytest's temporary folders. Hypothesis keeps caches (constants found
in the code under test, Unicode tables) in its home folder even without an example database, some of them
while tests are collected: its home is a temporary folder while this folder's tests are collected and run,
and Hypothesis' default (.hypothesis in the working folder) for everything else."""
import tempfile

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

_COLLECTING_HOME = tempfile.TemporaryDirectory(prefix="tokensim-fuzz-hypothesis-")
set_hypothesis_home_dir(_COLLECTING_HOME.name)      # this file is imported before the fuzz modules are collected


def pytest_collection_finish(session):
    set_hypothesis_home_dir(None)


def pytest_sessionfinish(session, exitstatus):
    _COLLECTING_HOME.cleanup()


@pytest.fixture(autouse=True, scope="module")
def _hypothesis_home_in_tmp(tmp_path_factory):
    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)
