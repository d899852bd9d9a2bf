"""TD507 checkpoint-not-atomic: static."""

from __future__ import annotations

from helpers.snippets import checkpoint_found


def test_atomic_write_pattern_and_per_step_files_are_silent():
    src = """
    import os
    import tempfile
    import torch

    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, weights_only=True)
    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            fd, tmp_path = tempfile.mkstemp(dir=os.path.dirname(args.ckpt))
            torch.save(model.state_dict(), tmp_path)
            os.replace(tmp_path, args.ckpt)
    """
    assert [c for c, _ in checkpoint_found(src)] == []
