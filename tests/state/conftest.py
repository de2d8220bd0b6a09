"""Fixtures of the state tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import AsyncSession
from tests.generation_helpers import DEADLINE


@pytest.fixture
async def sessions(work_dir: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await start(**kwargs)``: a started AsyncSession in this test's work dir (a timeout of
    ``DEADLINE`` unless given), every one closed at the end."""
    made: list[AsyncSession] = []

    async def start(**kwargs: Any) -> AsyncSession:
        kwargs.setdefault("work_dir", work_dir)
        kwargs.setdefault("timeout", DEADLINE)
        session = await AsyncSession(**kwargs).start()
        made.append(session)
        return session

    yield start
    for session in made:
        await session.close()
