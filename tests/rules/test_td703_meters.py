"""TD703 through an average meter of another module: ``losses.update(loss, n)`` where the meter's
``update`` sums its argument into an attribute."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows

UTILS = """
    class AverageMeter:
        def __init__(self):
            self.reset()

        def reset(self):
            self.val = self.avg = self.sum = self.count = 0

        def update(self, val, n=1):
            self.val = val
            self.sum += val * n
            self.count += n
            self.avg = self.sum / self.count

    class NumberMeter(AverageMeter):
        def update(self, val, n=1):
            self.sum += float(val) * n
    """

TRAIN = """
    from utils import *

    def train(loader, model, criterion, optimizer):
        losses = {meter}()
        for images, targets in loader:
            loss = criterion(model(images), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.update({passed}, images.size(0))
        return losses.avg
    """


def test_a_meter_of_another_module_summing_the_loss_tensor(tmp_path: Path) -> None:
    files = {"utils.py": UTILS, "train.py": TRAIN.format(meter="AverageMeter", passed="loss")}
    result = check(tmp_path, files, "train.py", ["TD703"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD703", 10)]
    finding = result.findings[0]
    assert "`losses.update` sums the loss tensor `loss`" in finding.message
    (related,) = finding.related
    assert related.filename.endswith("utils.py") and related.location.row == 10


def test_meters_given_a_number_or_converting_it_are_fine(tmp_path: Path) -> None:
    cases = [("AverageMeter", "loss.item()"), ("NumberMeter", "loss"), ("AverageMeter", "loss.detach()")]
    for i, (meter, passed) in enumerate(cases):
        files = {"utils.py": UTILS, "train.py": TRAIN.format(meter=meter, passed=passed)}
        assert checked_rows(tmp_path / str(i), files, "train.py", ["TD703"]) == [], (meter, passed)
