"""TD506 unsafe-torch-load: static."""

from __future__ import annotations

from helpers.snippets import checkpoint_found, checkpoint_run


def test_unsafe_torch_load_fixes():
    src = """
    import torch

    a = torch.load("a.pt", weights_only=False)
    b = torch.load("b.pt")
    """
    assert checkpoint_found(src) == [("TD506", 3)]
    assert checkpoint_found(src, min_torch="2.5") == [("TD506", 3), ("TD506", 4)]
    # Only unsafe fixes: --fix alone changes nothing.
    assert checkpoint_run(src, min_torch="2.5", fix=True).fixed_source is None
    fixed = checkpoint_run(src, min_torch="2.5", fix=True, unsafe=True).fixed_source
    assert fixed == (
        'import torch\n\na = torch.load("a.pt", weights_only=True)\nb = torch.load("b.pt", weights_only=True)\n'
    )
    assert checkpoint_found(fixed, min_torch="2.5") == []
    finding = checkpoint_run(src).findings[0]
    assert finding.fix is not None and finding.fix.applicability == "unsafe"


def test_unsafe_torch_load_variable_value_is_silent_but_constant_is_read():
    src = """
    import torch

    SAFE = False
    a = torch.load("a.pt", weights_only=SAFE)
    b = torch.load("b.pt", weights_only=trusted)
    """
    result = checkpoint_run(src)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD506", 4)]
    assert result.findings[0].fix is None  # never rewrite a shared constant


def test_test_code_reading_back_its_own_file_is_left_alone(tmp_path):
    from helpers.project_tree import checked_rows

    round_trip = """
    import torch

    def test_incremental_write(tmp_path):
        fn = str(tmp_path / "test.pt")
        write_state(fn)
        state = torch.load(fn, weights_only=False)
        assert state.keys() == {"0", "1"}

    def load_for_eval(path):
        return torch.load(path, weights_only=False)  # TD506
    """
    # a test module: silent; the same code in a library module: the non-test load only
    assert checked_rows(tmp_path, {"tests/test_utils.py": round_trip}, "tests/test_utils.py", ["TD506"]) == []
    assert checked_rows(tmp_path, {"lib/utils.py": round_trip}, "lib/utils.py", ["TD506"]) == [("TD506", 10)]
