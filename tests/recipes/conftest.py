import pytest


@pytest.fixture(autouse=True)
def _clean_seed_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """seed_everything() writes environment variables; every test starts and ends without them."""
    for name in ("TRAINDOCTOR_SEED_WORKERS", "TRAINDOCTOR_GLOBAL_SEED", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
