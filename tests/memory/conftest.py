from datetime import datetime

import pytest

from memory.bank import MemoryBank
from memory.forgetting import PAPER


@pytest.fixture
def paper_bank(tmp_path, e5_embedder):
    """Like ``bank`` (tests/conftest.py), with the forgetting law on the paper's scale."""
    bank = MemoryBank(tmp_path / "home", e5_embedder, policy=PAPER)  # the law on the paper's scale (days, S = 1)
    yield bank
    bank.close()


@pytest.fixture
def day1():
    return datetime(2024, 5, 1, 10, 0)
