"""TD401 on models named by string or loaded by class: timm's ``create_model`` imported from
``timm.models`` with timm's fixed-size loader, a project registry read with a key of no known value
(``deit.__dict__[model_name]``), diffusers' convolutional UNets."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows

TIMM_TRAIN = """
    import argparse
    import torch
    from timm.data import create_loader
    from timm.models import create_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="{model}")
    args = parser.parse_args()

    def main():
        model = create_model(args.model, num_classes=1000).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = create_loader(dataset, input_size=(3, 224, 224), batch_size=128, is_training=True)
        for epoch in range(10):
            for x, y in loader:
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    """


def test_timm_cnn_by_name_with_timms_fixed_size_loader(tmp_path: Path) -> None:
    result = check(tmp_path / "a", {"train.py": TIMM_TRAIN.format(model="resnet50")}, "train.py", ["TD401"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD401", 11)]
    assert "torch.backends.cudnn.benchmark" in result.findings[0].message
    # a transformer by default: not convolutional
    vit = TIMM_TRAIN.format(model="vit_base_patch16_224")
    assert checked_rows(tmp_path / "b", {"train.py": vit}, "train.py", ["TD401"]) == []


MODELS = """
    from torch import nn

    class PatchEmbed(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Conv2d(3, dim, kernel_size=16, stride=16)

    class VisionTransformer(nn.Module):
        def __init__(self, dim=192, depth=12):
            super().__init__()
            self.patch_embed = PatchEmbed(dim)
            self.blocks = nn.Sequential(*[nn.Linear(dim, dim) for _ in range(depth)])

    class MLPMixer(nn.Module):
        def __init__(self, dim=192):
            super().__init__()
            self.fc = nn.Linear(3 * 224 * 224, dim)

    def vit_tiny(**kwargs):
        return VisionTransformer(dim=192, **kwargs)

    def vit_small(**kwargs):
        return VisionTransformer(dim=384, **kwargs)
    """

REGISTRY_TRAIN = """
    import torch
    from torchvision import transforms
    import src.models as models

    def main(args):
        model_name = args["meta"]["model_name"]
        encoder = models.__dict__[model_name]().cuda()
        tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
        optimizer = torch.optim.AdamW(encoder.parameters())
        for epoch in range(10):
            for x in loader:
                encoder(x).sum().backward()
                optimizer.step()
    """


def test_project_registry_with_an_unknown_key_whose_candidates_are_all_convolutional(tmp_path: Path) -> None:
    files = {"src/__init__.py": "", "src/models.py": MODELS, "train.py": REGISTRY_TRAIN}
    (tmp_path / ".git").mkdir()
    result = check(tmp_path, files, "train.py", ["TD401"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD401", 7)]
    # one candidate without a convolution: the model may be that one
    mixed = MODELS + "\ndef mixer(**kwargs):\n    return MLPMixer(**kwargs)\n"
    files["src/models.py"] = mixed
    assert checked_rows(tmp_path, files, "train.py", ["TD401"]) == []


DIFFUSERS = """
    import torch
    from torchvision import transforms
    from diffusers import UNet2DConditionModel

    def main(args):
        unet = UNet2DConditionModel.from_pretrained(args.pretrained, subfolder="unet").to("cuda")
        tf = transforms.Compose([transforms.Resize(512), transforms.CenterCrop(512), transforms.ToTensor()])
        optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5)
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True{collate})
        for epoch in range(10):
            for batch in loader:
                unet(batch).sample.mean().backward()
                optimizer.step()
    """


def test_diffusers_unet_loaded_by_from_pretrained_is_convolutional(tmp_path: Path) -> None:
    result = check(tmp_path / "a", {"train.py": DIFFUSERS.format(collate="")}, "train.py", ["TD401"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD401", 6)]
    # a padding collate: shapes may vary, the rule stays silent
    padded = DIFFUSERS.format(collate=", collate_fn=pad_batch")
    assert checked_rows(tmp_path / "b", {"train.py": padded}, "train.py", ["TD401"]) == []


RUNNER = """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader
    from torchvision import transforms

    train_tf = transforms.Compose([transforms.RandomResizedCrop(32), transforms.ToTensor()])


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 64, 3)

        def forward(self, x):
            return self.conv(x).mean()


    def train(dataset):
        model = Net().cuda()
        opt = torch.optim.Adam(model.parameters())
        loader = DataLoader(dataset, batch_size=64, shuffle=True, drop_last=True)
        for epoch in range(10):
            for x in loader:
                model(x.cuda()).backward()
                opt.step()
                opt.zero_grad()
    """


def test_benchmark_set_by_the_entry_script_that_imports_the_runner(tmp_path: Path) -> None:
    # ddim's shape: main.py sets the process-wide flag, then calls the runner module's training
    entry = """
    import torch
    from runners.diffusion import train

    def main():
        torch.backends.cudnn.benchmark = True
        train(dataset)

    if __name__ == "__main__":
        main()
    """
    files = {"setup.py": "", "runners/__init__.py": "", "runners/diffusion.py": RUNNER, "main.py": entry}
    assert checked_rows(tmp_path / "a", files, "runners/diffusion.py", ["TD401"]) == []
    unset = {**files, "main.py": entry.replace("torch.backends.cudnn.benchmark = True", "pass")}
    assert checked_rows(tmp_path / "b", unset, "runners/diffusion.py", ["TD401"]) == [("TD401", 12)]


def test_benchmark_set_by_a_project_helper_the_script_imports(tmp_path: Path) -> None:
    # sam's shape: the script calls utility.initialize(), which sets the flag
    helper = """
    import torch

    def initialize(seed):
        torch.manual_seed(seed)
        torch.backends.cudnn.benchmark = True
    """
    script = RUNNER.replace("import torch\n", "import torch\n    from utility.initialize import initialize\n", 1)
    script += "\n    initialize(42)\n    train(dataset)\n"
    files = {"utility/__init__.py": "", "utility/initialize.py": helper, "train.py": script}
    assert checked_rows(tmp_path / "a", files, "train.py", ["TD401"]) == []
    plain = {**files, "utility/initialize.py": helper.replace("torch.backends.cudnn.benchmark = True", "pass")}
    assert checked_rows(tmp_path / "b", plain, "train.py", ["TD401"]) == [("TD401", 13)]
