"""TD703 loss-accumulated-as-tensor: static."""

from __future__ import annotations

from helpers.snippets import eval_check, eval_rows


def test_td703_unsafe_fix_only():
    src = """
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        total += loss
    """
    safe = eval_check(src, ["TD703"], fix=True)
    assert safe.fixed_source is None
    unsafe = eval_check(src, ["TD703"], fix=True, unsafe_fixes=True)
    assert unsafe.fixed_source.splitlines()[5] == "    total += loss.detach()"
    assert eval_rows(unsafe.fixed_source, ["TD703"]) == []


def test_td703_silent_for_non_losses_and_losses_outside_training():
    src = """
    outputs = 0
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        outputs += out          # a model output, not a loss

    def evaluate(model, loader):
        total = 0
        for x, y in loader:
            loss = criterion(model(x), y)
            total += loss       # no backward in this function: not a training loop
        return total
    """
    assert eval_rows(src, ["TD703"]) == []


def test_td703_loss_rebound_from_item_is_not_attached():
    src = """
    total = 0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        loss = loss.item()
        total = total + loss
    """
    assert eval_rows(src, ["TD703"]) == []
    assert eval_rows(src.replace("        loss = loss.item()\n", ""), ["TD703"]) == [("TD703", 6)]
