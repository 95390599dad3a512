import pytest

from rollout_helpers import make_llama


@pytest.fixture(scope="module")
def llama():
    return make_llama(0)
