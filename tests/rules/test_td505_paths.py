"""TD505 on the path the resume takes: the binding of the checkpoint name that reaches the
restore, the branch the restore runs in, and key reads that are no restore (a config's key, an
entry of an entry)."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check

CODES = ["TD501", "TD502", "TD503", "TD504", "TD505"]

# The checkpoint name is bound three times in one function: the resume's torch.load, a
# weights-only load in another branch, and the dict the loop saves.
REBOUND = """
    import torch
    from safetensors.torch import load_file

    def main(args, model, model_ema, loader):
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, 30)
        step = 0
        if args.resume:
            ckpt = torch.load(args.resume, map_location="cpu")
            model.load_state_dict(ckpt["model"])
            model_ema.load_state_dict(ckpt["model_ema"])
            OPT_RESTORE
            sched.load_state_dict(ckpt["sched"])
            step = ckpt["step"] + 1
        if args.init_weights:
            ckpt = load_file(args.init_weights)
            model.load_state_dict(ckpt)
        for batch in loader:
            model(batch).mean().backward()
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step % 1000 == 0:
                ckpt = {"model": model.state_dict(), "model_ema": model_ema.state_dict(),
                        "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step,
                        "rng": torch.get_rng_state()}
                torch.save(ckpt, f"{args.name}_{step:08}.pth")
    """


def test_the_binding_that_reaches_the_restore_decides(tmp_path: Path) -> None:
    files = {"train.py": REBOUND.replace("OPT_RESTORE", "pass"), "pyproject.toml": ""}
    result = check(tmp_path, files, "train.py", CODES)
    # one finding for the two models restored from the one checkpoint, at the first restore
    assert [(f.code, f.location.row) for f in result.findings] == [("TD505", 10)]
    message = result.findings[0].message
    assert 'optimizer (saved as "opt")' in message and "opt.load_state_dict" in message


def test_a_complete_resume_beside_a_rebound_name_is_silent(tmp_path: Path) -> None:
    files = {"train.py": REBOUND.replace("OPT_RESTORE", 'opt.load_state_dict(ckpt["opt"])'), "pyproject.toml": ""}
    assert check(tmp_path, files, "train.py", CODES).findings == []


# nanoGPT/llama2.c shape: module-level script, the name freed with ``checkpoint = None`` and bound
# again to the dict the loop saves; the weights copied through another name.
FREED = """
    import torch

    init_from = "resume"
    model = Transformer()
    if init_from == "resume":
        checkpoint = torch.load("out/ckpt.pt", map_location="cpu")
        state_dict = checkpoint["model"]
        for k, v in list(state_dict.items()):
            if k.startswith("_orig_mod."):
                state_dict[k[len("_orig_mod."):]] = state_dict.pop(k)
        model.load_state_dict(state_dict)
        iter_num = checkpoint["iter_num"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
    if init_from == "resume" and "optimizer" in checkpoint:
        OPT_RESTORE
    checkpoint = None
    iter_num = 0
    while True:
        X, Y = get_batch("train")
        model(X, Y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if iter_num % 2000 == 0:
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num,
                          "rng": torch.get_rng_state()}
            torch.save(checkpoint, "out/ckpt.pt")
        iter_num += 1
    """


def test_a_name_freed_after_the_resume_still_reads_the_checkpoint(tmp_path: Path) -> None:
    result = check(
        tmp_path, {"train.py": FREED.replace("OPT_RESTORE", "pass"), "pyproject.toml": ""}, "train.py", CODES
    )
    assert [(f.code, f.location.row) for f in result.findings] == [("TD505", 11)]
    restored = FREED.replace("OPT_RESTORE", 'optimizer.load_state_dict(checkpoint["optimizer"])')
    assert check(tmp_path, {"train.py": restored}, "train.py", CODES).findings == []


# A trainer class with two resume branches: its own checkpoint, and another run's checkpoint
# continued from (the optimizer only on request).
SOLVER = """
    import torch

    class Solver:
        def __init__(self, model, optimizer, args):
            self.model = model
            self.optimizer = optimizer
            self.args = args
            self.checkpoint_file = args.folder / "checkpoint.th"
            self._reset()

        def _serialize(self, epoch):
            package = {"state": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                       "epoch": epoch, "rng": torch.get_rng_state()}
            torch.save(package, self.checkpoint_file)

        def _reset(self):
            if self.checkpoint_file.exists():
                package = torch.load(self.checkpoint_file, "cpu")
                self.model.load_state_dict(package["state"])
                OWN_RESTORE
            elif self.args.continue_from:
                package = torch.load(self.args.continue_from, "cpu")
                self.model.load_state_dict(package["state"], strict=False)
                if self.args.continue_opt:
                    CONTINUE_RESTORE

        def train(self, loader):
            for epoch in range(self.args.epochs):
                for x in loader:
                    self.optimizer.zero_grad()
                    self.model(x).mean().backward()
                    self.optimizer.step()
                self._serialize(epoch)
    """
_RESTORE = 'self.optimizer.load_state_dict(package["optimizer"])'


def test_a_restore_in_another_branch_does_not_restore_this_path(tmp_path: Path) -> None:
    own_missing = SOLVER.replace("OWN_RESTORE", "pass").replace("CONTINUE_RESTORE", _RESTORE)
    result = check(tmp_path, {"solver.py": own_missing, "pyproject.toml": ""}, "solver.py", CODES)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD505", 19)]
    continue_missing = SOLVER.replace("OWN_RESTORE", _RESTORE).replace("CONTINUE_RESTORE", "pass")
    result = check(tmp_path, {"solver.py": continue_missing}, "solver.py", CODES)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD505", 23)]
    both = SOLVER.replace("OWN_RESTORE", _RESTORE).replace("CONTINUE_RESTORE", _RESTORE)
    assert check(tmp_path, {"solver.py": both}, "solver.py", CODES).findings == []


# The optimizer's config key is read (to warn about a changed optimizer type), its state is not.
CONFIG_READ = """
    import torch

    class BaseTrainer:
        def __init__(self, model, config, resume):
            self.model = model
            self.config = config
            self.optimizer = torch.optim.SGD(model.parameters(), lr=config["optimizer"]["lr"], momentum=0.9)
            if resume:
                self._resume_checkpoint(resume)

        def _save_checkpoint(self, epoch):
            state = {"epoch": epoch, "state_dict": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "config": self.config, "rng": torch.get_rng_state()}
            torch.save(state, f"checkpoint-epoch{epoch}.pth")

        def _resume_checkpoint(self, resume_path):
            checkpoint = torch.load(resume_path)
            self.start_epoch = checkpoint["epoch"] + 1
            self.model.load_state_dict(checkpoint["state_dict"])
            if checkpoint["config"]["optimizer"]["type"] != self.config["optimizer"]["type"]:
                print("optimizer changed")
            RESTORE

        def train(self, loader):
            for epoch in range(self.start_epoch, 10):
                for x in loader:
                    self.optimizer.zero_grad()
                    self.model(x).mean().backward()
                    self.optimizer.step()
                self._save_checkpoint(epoch)
    """


def test_a_config_key_named_like_the_state_is_no_restore(tmp_path: Path) -> None:
    result = check(
        tmp_path, {"trainer.py": CONFIG_READ.replace("RESTORE", "pass"), "pyproject.toml": ""}, "trainer.py", CODES
    )
    assert [(f.code, f.location.row) for f in result.findings] == [("TD505", 19)]
    assert "optimizer" in result.findings[0].message
    restored = CONFIG_READ.replace("RESTORE", 'self.optimizer.load_state_dict(checkpoint["optimizer"])')
    assert check(tmp_path, {"trainer.py": restored}, "trainer.py", CODES).findings == []


# Several trainer classes in one file, each resuming its own checkpoint.
TRAINERS = """
    import torch
    from torch import optim

    class DecompTrainer:
        def __init__(self, enc):
            self.enc = enc
            self.opt_enc = optim.Adam(self.enc.parameters(), lr=1e-4)

        def resume(self, model_dir):
            checkpoint = torch.load(model_dir)
            self.enc.load_state_dict(checkpoint["enc"])
            self.opt_enc.load_state_dict(checkpoint["opt_enc"])
            return checkpoint["ep"]

        def save(self, file_name, ep):
            torch.save({"enc": self.enc.state_dict(), "opt_enc": self.opt_enc.state_dict(), "ep": ep}, file_name)

    class EstimatorTrainer:
        def __init__(self, estimator):
            self.estimator = estimator
            self.opt_estimator = optim.Adam(self.estimator.parameters(), lr=1e-4)

        def resume(self, model_dir):
            checkpoints = torch.load(model_dir)
            self.estimator.load_state_dict(checkpoints["estimator"])
            RESTORE
            return checkpoints["epoch"]

        def save(self, model_dir, epoch):
            torch.save({"estimator": self.estimator.state_dict(),
                        "opt_estimator": self.opt_estimator.state_dict(), "epoch": epoch}, model_dir)
    """


def test_a_restore_in_another_class_does_not_restore_this_resume(tmp_path: Path) -> None:
    missing = TRAINERS.replace("RESTORE", "pass")
    result = check(tmp_path, {"trainers.py": missing, "pyproject.toml": ""}, "trainers.py", ["TD505"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD505", 25)]
    assert 'optimizer (saved as "opt_estimator")' in result.findings[0].message
    restored = TRAINERS.replace("RESTORE", 'self.opt_estimator.load_state_dict(checkpoints["opt_estimator"])')
    assert check(tmp_path, {"trainers.py": restored}, "trainers.py", ["TD505"]).findings == []
