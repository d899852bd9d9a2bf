"""Checkpoint classes of issue 21 round 4, one small project per test: what an object's attributes
hold, saves written after training or on the last pass only, helpers nobody here calls, weights
split over several files, schedules built by a project's own class or replayed on resume, and
keys that name a position."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check

CODES = ["TD501", "TD502", "TD503", "TD504", "TD505"]


def _rows(tmp_path: Path, source: str, name: str = "train.py", codes: list[str] = CODES) -> list[tuple[str, int]]:
    result = check(tmp_path, {name: source, "pyproject.toml": ""}, name, codes)
    return [(f.code, f.location.row) for f in result.findings]


# A trainer base class: its attributes hold the optimizer and the schedule; the epoch is trained
# by a subclass in another module (``_train_epoch``), the schedule stepped there with the epoch.
BASE_TRAINER = """
    import torch
    from utils import lr_scheduler

    class BaseTrainer:
        def __init__(self, model, config):
            self.model = model
            self.optimizer = getattr(torch.optim, config["optimizer"]["type"])(model.parameters(), lr=0.01)
            self.lr_scheduler = lr_scheduler.Poly(self.optimizer, config["epochs"])
            self.start_epoch = 1

        def train(self):
            for epoch in range(self.start_epoch, 100):
                self._train_epoch(epoch)
                self._save_checkpoint(epoch)

        def _save_checkpoint(self, epoch):
            state = {"epoch": epoch, "state_dict": self.model.state_dict(), SAVED
                     "rng": torch.get_rng_state()}
            torch.save(state, f"checkpoint-epoch{epoch}.pth")

        def _train_epoch(self, epoch):
            raise NotImplementedError
    """


def test_a_save_method_of_an_object_that_holds_the_optimizer(tmp_path: Path) -> None:
    full = BASE_TRAINER.replace("SAVED", '"optimizer": self.optimizer.state_dict(),')
    assert _rows(tmp_path, full, "base_trainer.py") == []  # the schedule is stepped elsewhere (by epoch)
    result = check(tmp_path, {"base_trainer.py": BASE_TRAINER.replace("SAVED", "")}, "base_trainer.py", CODES)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD501", 19)]
    assert "not the state of `self.optimizer`, which the object that saves it holds" in result.findings[0].message
    # a schedule this file advances by itself is lost too
    stepped = full.replace(
        "self._save_checkpoint(epoch)", "self.lr_scheduler.step()\n            self._save_checkpoint(epoch)"
    )
    assert _rows(tmp_path, stepped, "base_trainer.py") == [("TD502", 20)]


# pycls's shape: the helper also keeps the best weights by loading the best file back, updating it
# and saving it again.
CHECKPOINT_HELPERS = """
    import torch

    def save_checkpoint(model, optimizer, epoch, test_err):
        checkpoint = {"epoch": epoch, "test_err": test_err, "model_state": model.state_dict(), SAVED
                      "rng": torch.get_rng_state()}
        torch.save(checkpoint, f"checkpoints/model_epoch_{epoch + 1:04d}.pyth")
        best = torch.load("model.pyth", map_location="cpu")
        if test_err < best["test_err"]:
            best["model_state"] = checkpoint["model_state"]
            best["test_err"] = test_err
            torch.save(best, "model.pyth")
    """


def test_a_checkpoint_saved_back_after_loading_holds_nothing_of_its_own(tmp_path: Path) -> None:
    assert (
        _rows(
            tmp_path, CHECKPOINT_HELPERS.replace("SAVED", '"optimizer_state": optimizer.state_dict(),'), "checkpoint.py"
        )
        == []
    )
    assert _rows(tmp_path, CHECKPOINT_HELPERS.replace("SAVED", ""), "checkpoint.py") == [("TD501", 6)]


# StyleTTS2's shape: a periodic checkpoint in the epoch loop and a final one after it, written by
# a main() the module runs once; only the final one holds the optimizer.
FINAL = """
    import torch

    def main(model, loader, epochs):
        optimizer = torch.optim.AdamW(model.parameters())
        iters = 0
        for epoch in range(epochs):
            for batch in loader:
                optimizer.zero_grad()
                model(batch).backward()
                optimizer.step()
                iters += 1
            if epoch % 5 == 0:
                state = {"net": model.state_dict(), "iters": iters, "epoch": epoch}
                torch.save(state, f"epoch_1st_{epoch:05d}.pth")
        state = {"net": model.state_dict(), "optimizer": optimizer.state_dict(), "iters": iters, "epoch": epoch}
        torch.save(state, "first_stage.pth")

    if __name__ == "__main__":
        main(build_model(), build_loader(), 100)
    """


def test_the_final_save_after_training_is_no_checkpoint_for_the_periodic_one(tmp_path: Path) -> None:
    result = check(tmp_path, {"train_first.py": FINAL, "pyproject.toml": ""}, "train_first.py", CODES)
    # the periodic checkpoint lacks the optimizer only the final save holds; the final save,
    # the run's result, is not asked for RNG state
    assert [(f.code, f.location.row) for f in result.findings] == [("TD501", 14)]
    assert "(only the best-so-far or final save holds it)" in result.findings[0].message


# deeplab's shape: an epoch function (its loop is one pass over the batches) saves after the loop;
# the script calls it once per epoch from another module.
EPOCH_FUNCTION = """
    import torch

    class Trainer:
        def __init__(self, model):
            self.model = model
            self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def training(self, epoch, loader):
            for image, target in loader:
                self.optimizer.zero_grad()
                torch.nn.functional.cross_entropy(self.model(image), target).backward()
                self.optimizer.step()
            torch.save({"epoch": epoch + 1, "state_dict": self.model.state_dict(),
                        "optimizer": self.optimizer.state_dict()}, "checkpoint.pth.tar")
    """


def test_a_save_after_the_batch_loop_of_an_epoch_function_is_the_periodic_checkpoint(tmp_path: Path) -> None:
    assert _rows(tmp_path, EPOCH_FUNCTION) == [("TD504", 13)]


# nanochat's SFT shape: saved inside the loop, but only on its last pass.
LAST_PASS = """
    import torch

    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler()
    num_iterations = 1000
    for step in range(num_iterations + 1):
        last_step = step == num_iterations
        loss = model(next(batches))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if LAST_TEST:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, "sft.pt")
    """


def test_a_save_on_the_last_pass_only_is_the_run_result(tmp_path: Path) -> None:
    assert _rows(tmp_path, LAST_PASS.replace("LAST_TEST", "last_step")) == []
    assert _rows(tmp_path, LAST_PASS.replace("LAST_TEST", "step == num_iterations")) == []
    # every 100 steps, or at the end: a periodic checkpoint without the scaler and RNG state
    assert _rows(tmp_path, LAST_PASS.replace("LAST_TEST", "last_step or step % 100 == 0")) == [
        ("TD503", 14),
        ("TD504", 14),
    ]


# faster-rcnn's shape: a trainer's save() that a script calls only when the metric improves; it
# keeps no epoch and nothing here reads it back to resume.
UNCALLED = """
    import torch

    class FasterRCNNTrainer(torch.nn.Module):
        def __init__(self, faster_rcnn):
            super().__init__()
            self.faster_rcnn = faster_rcnn
            self.optimizer = self.faster_rcnn.get_optimizer()

        def train_step(self, imgs, bboxes):
            self.optimizer.zero_grad()
            self.forward(imgs, bboxes).backward()
            self.optimizer.step()

        def save(self, save_path, **kwargs):
            save_dict = {"model": self.faster_rcnn.state_dict(), "optimizer": self.optimizer.state_dict(),
                         "other_info": kwargs EPOCH}
            torch.save(save_dict, save_path)
    """


def test_a_save_in_a_helper_nobody_here_calls_needs_a_position_for_rng(tmp_path: Path) -> None:
    assert _rows(tmp_path, UNCALLED.replace(" EPOCH", ""), "trainer.py") == []
    assert _rows(tmp_path, UNCALLED.replace(" EPOCH", ', "epoch": kwargs["epoch"]'), "trainer.py") == [("TD504", 17)]


# CSAIL's shape: one per-epoch checkpoint written as several weight files.
SEVERAL_FILES = """
    import torch

    def checkpoint(nets, history, epoch):
        (net_encoder, net_decoder) = nets
        torch.save(history, f"ckpt/history_epoch_{epoch}.pth")
        torch.save(net_encoder.state_dict(), f"ckpt/encoder_epoch_{epoch}.pth")
        torch.save(net_decoder.state_dict(), f"ckpt/decoder_epoch_{epoch}.pth")

    def main(nets, loader, history):
        optimizer = torch.optim.SGD([p for n in nets for p in n.parameters()], lr=0.02, momentum=0.9)
        for epoch in range(20):
            for batch in loader:
                optimizer.zero_grad()
                nets[1](nets[0](batch)).mean().backward()
                optimizer.step()
            checkpoint(nets, history, epoch + 1)
    """


def test_several_weight_files_of_one_checkpoint_are_one_finding(tmp_path: Path) -> None:
    result = check(tmp_path, {"train.py": SEVERAL_FILES, "pyproject.toml": ""}, "train.py", ["TD501"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD501", 6)]
    assert [(r.location.row, r.message) for r in result.findings[0].related] == [
        (7, "another weights file of this checkpoint")
    ]


# k-diffusion's shape: the schedule is a class of the project handed the optimizer; an EMA
# warm-up schedule of another class is saved beside it.
OWN_SCHEDULE = """
    import torch
    import k_diffusion as K

    def main(model, train_dl, args):
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        sched = K.utils.InverseLR(opt, inv_gamma=20000.0, power=1.0, warmup=0.99)
        ema_sched = K.utils.EMAWarmup(power=0.75, max_value=0.9999)
        step = 0
        for batch in train_dl:
            model.loss(batch).mean().backward()
            opt.step()
            sched.step()
            opt.zero_grad()
            ema_sched.step()
            step += 1
            if step % 10000 == 0:
                obj = {"model": model.state_dict(), "opt": opt.state_dict(), SAVED "step": step,
                       "rng": torch.get_rng_state()}
                torch.save(obj, f"{args.name}_{step:08}.pth")
    """


def test_a_schedule_of_the_projects_own_class_is_a_schedule(tmp_path: Path) -> None:
    both = '"sched": sched.state_dict(), "ema_sched": ema_sched.state_dict(),'
    assert _rows(tmp_path, OWN_SCHEDULE.replace("SAVED", both)) == []
    assert _rows(tmp_path, OWN_SCHEDULE.replace("SAVED", '"ema_sched": ema_sched.state_dict(),')) == [("TD502", 19)]
    assert _rows(tmp_path, OWN_SCHEDULE.replace("SAVED", "")) == [("TD502", 19)]
    # replayed on resume: the schedule is put back from the step
    replay = OWN_SCHEDULE.replace("SAVED", "").replace(
        "        step = 0\n",
        "        step = args.start_step\n        for _ in range(step):\n            sched.step()\n",
    )
    assert _rows(tmp_path, replay) == []


# llama2.c's shape: the iteration counter saved under a key of its own spelling.
POSITION_KEY = """
    import torch

    model = Transformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    iter_num = 0
    best_val_loss = 1e9
    if init_from == "resume":
        checkpoint = torch.load("out/ckpt.pt", map_location="cpu")
        model.load_state_dict(checkpoint["model"])
        iter_num = checkpoint["iter_num"]
        best_val_loss = checkpoint["best_val_loss"]
    while True:
        if iter_num % 2000 == 0:
            checkpoint = {"model": model.state_dict(), "model_args": model_args, "iter_num": iter_num,
                          "best_val_loss": best_val_loss, "rng": torch.get_rng_state()}
            torch.save(checkpoint, "out/ckpt.pt")
        X, Y = get_batch("train")
        model(X, Y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        iter_num += 1
    """


def test_a_position_key_of_any_spelling_holds_no_optimizer(tmp_path: Path) -> None:
    # the counter read back on resume is saved again: a number under a key that says so
    assert _rows(tmp_path, POSITION_KEY) == [("TD501", 16)]


# DETR's shape: the evaluator's results are saved beside the checkpoint every epoch.
EVAL_DUMP = """
    import torch
    import utils
    from engine import train_one_epoch, evaluate

    def main(args, model, criterion, data_loader_train, data_loader_val, base_ds, output_dir):
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        for epoch in range(args.start_epoch, args.epochs):
            train_one_epoch(model, criterion, data_loader_train, optimizer, epoch)
            utils.save_on_master({"model": model.state_dict(), "epoch": epoch, "args": args,
                                  "rng": torch.get_rng_state()}, output_dir / "checkpoint.pth")
            test_stats, coco_evaluator = evaluate(model, criterion, data_loader_val, base_ds)
            if "bbox" in coco_evaluator.coco_eval:
                torch.save(coco_evaluator.coco_eval["bbox"].eval, output_dir / "eval" / "latest.pth")
    """


DETR_ENGINE = """
    import torch

    def train_one_epoch(model, criterion, data_loader, optimizer, epoch):
        model.train()
        for samples, targets in data_loader:
            losses = criterion(model(samples), targets)
            optimizer.zero_grad()
            losses.backward()
            optimizer.step()

    @torch.no_grad()
    def evaluate(model, criterion, data_loader, base_ds):
        model.eval()
        return {}, CocoEvaluator(base_ds)
    """
DETR_UTILS = """
    import torch

    def save_on_master(*args, **kwargs):
        torch.save(*args, **kwargs)
    """


def test_saved_evaluation_results_hold_no_training_state(tmp_path: Path) -> None:
    files = {"main.py": EVAL_DUMP, "engine.py": DETR_ENGINE, "utils.py": DETR_UTILS, "pyproject.toml": ""}
    result = check(tmp_path, files, "main.py", CODES)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD501", 9)]


# msn's shape: the step is a closure run through a timing helper, the checkpoint a nested helper.
CLOSURE_STEP = """
    import torch
    from src.utils import gpu_timer

    def main(args, encoder, unsupervised_loader):
        optimizer = torch.optim.AdamW(encoder.parameters())
        batch_size = args["criterion"]["batch_size"]
        temperature = args["criterion"]["temperature"]

        def save_checkpoint(epoch):
            save_dict = {"encoder": encoder.state_dict(), "epoch": epoch, "batch_size": batch_size,
                         "temperature": temperature, "rng": torch.get_rng_state()}
            torch.save(save_dict, "latest.pth.tar")

        for epoch in range(args["epochs"]):
            for itr, udata in enumerate(unsupervised_loader):
                def train_step():
                    optimizer.zero_grad()
                    loss = encoder(udata).mean()
                    loss.backward()
                    optimizer.step()
                    return float(loss)
                loss, etime = gpu_timer(train_step)
                if itr % 100 == 0:
                    save_checkpoint(epoch)
            save_checkpoint(epoch + 1)
    """


def test_a_step_closure_run_through_a_helper_trains(tmp_path: Path) -> None:
    assert _rows(tmp_path, CLOSURE_STEP, "msn_train.py") == [("TD501", 12)]


# Several trainer classes in one file, each saving the optimizers it builds.
TRAINERS = """
    import torch
    from torch import optim

    class DecompTrainer:
        def __init__(self, enc, dec):
            self.enc, self.dec = enc, dec
            self.opt_enc = optim.Adam(self.enc.parameters(), lr=1e-4)
            self.opt_dec = optim.Adam(self.dec.parameters(), lr=1e-4)

        def save(self, file_name, ep):
            torch.save({"enc": self.enc.state_dict(), "dec": self.dec.state_dict(),
                        "opt_enc": self.opt_enc.state_dict(), DEC_OPT "ep": ep}, file_name)

    class EstimatorTrainer:
        def __init__(self, estimator):
            self.estimator = estimator
            self.opt_estimator = optim.Adam(self.estimator.parameters(), lr=1e-4)

        def save(self, model_dir, epoch):
            torch.save({"estimator": self.estimator.state_dict(),
                        "opt_estimator": self.opt_estimator.state_dict(), "epoch": epoch}, model_dir)
    """


def test_each_class_is_compared_with_the_optimizers_it_builds(tmp_path: Path) -> None:
    full = TRAINERS.replace("DEC_OPT", '"opt_dec": self.opt_dec.state_dict(),')
    assert _rows(tmp_path, full, "trainers.py", ["TD501"]) == []
    result = check(tmp_path, {"trainers.py": TRAINERS.replace("DEC_OPT", "")}, "trainers.py", ["TD501"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD501", 11)]
    assert "not of `self.opt_dec`" in result.findings[0].message
