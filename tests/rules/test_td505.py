"""TD505 resume-incomplete: static."""

from __future__ import annotations

from helpers.snippets import checkpoint_found


def test_resume_reads_every_saved_key_through_get():
    src = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = torch.load("ckpt.pt", weights_only=True)
    model.load_state_dict(ckpt["model"])
    restore_optimizer(optimizer, ckpt.get("optimizer"))
    for epoch in range(3):
        train(model, loader, optimizer)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "rng": torch.get_rng_state()}, f"ckpt_{epoch}.pt")
    """
    assert checkpoint_found(src) == []
