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


DEIT_STYLE = """
import torch

def main(args, model, model_without_ddp, optimizer, lr_scheduler, teacher_model, train_one_epoch):
    if args.teacher_path:
        if args.teacher_path.startswith("https"):
            checkpoint = torch.hub.load_state_dict_from_url(args.teacher_path, map_location="cpu")
        else:
            checkpoint = torch.load(args.teacher_path, map_location="cpu")
        teacher_model.load_state_dict(checkpoint["model"])
        teacher_model.to("cuda")
        teacher_model.eval()
    if args.resume:
        if args.resume.startswith("https"):
            checkpoint = torch.hub.load_state_dict_from_url(args.resume, map_location="cpu")
        else:
            checkpoint = torch.load(args.resume, map_location="cpu")
        model_without_ddp.load_state_dict(checkpoint["model"])
        if "optimizer" in checkpoint:
            lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])
    for epoch in range(args.epochs):
        train_one_epoch(model, optimizer)
        lr_scheduler.step(epoch)
        torch.save({"model": model_without_ddp.state_dict(), "optimizer": optimizer.state_dict(),
                    "lr_scheduler": lr_scheduler.state_dict(), "epoch": epoch}, "checkpoint.pth")
"""


def test_a_resume_loaded_by_torch_load_or_from_a_url_is_one_resume_path():
    # DeiT/xcit/LeViT: the checkpoint comes from torch.hub for https paths, torch.load otherwise;
    # the distillation teacher loaded the same way and switched to eval() is not the resume
    assert checkpoint_found(DEIT_STYLE) == [("TD504", 23), ("TD505", 17)]
    restored = DEIT_STYLE.replace(
        '            lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])',
        '            lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])\n'
        '            optimizer.load_state_dict(checkpoint["optimizer"])',
    )
    assert ("TD505", 17) not in checkpoint_found(restored)
