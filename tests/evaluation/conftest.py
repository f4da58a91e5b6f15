"""Shared fixtures for the evaluation tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One thread, as each Ray worker gets on a 2-core machine: steadier and no contention."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
