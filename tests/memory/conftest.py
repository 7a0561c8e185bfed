from datetime import datetime

import pytest

from memory.bank import MemoryBank
from memory.embedders import create_embedder
from memory.forgetting import PAPER


@pytest.fixture(scope="session")
def e5():
    return create_embedder("e5")


@pytest.fixture
def mbank(tmp_path, e5):
    bank = MemoryBank(tmp_path / "home", e5, policy=PAPER)  # the law on the paper's scale (days, S = 1)
    yield bank
    bank.close()


@pytest.fixture
def day1():
    return datetime(2024, 5, 1, 10, 0)
