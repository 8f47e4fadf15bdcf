"""The fuzz suite writes nothing outside pytest's temporary folders: Hypothesis keeps a cache (of constants
found in the code under test) in its home folder even without an example database, so that folder is pointed
at a temporary one while these tests run."""
import pytest
from hypothesis.configuration import set_hypothesis_home_dir


@pytest.fixture(autouse=True, scope="module")
def _hypothesis_home_in_tmp(tmp_path_factory):
    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)
