"""Config classes as known values: dataclasses, Tap-style and plain classes, HfArgumentParser tuples,
in the checked file or another project module (``static/class_configs.py``)."""

from __future__ import annotations

import textwrap

import pytest
from helpers.project_tree import LOOP, check, rows, value_at

from traindoctor.static.args import UNKNOWN


def test_dataclass_in_another_module(tmp_path):
    files = {
        "configs.py": """
            from dataclasses import dataclass, field

            @dataclass
            class OptimConfig:
                lr: float = 3e-4
                weight_decay: float = 0.05

            @dataclass
            class TrainConfig:
                num_workers: int = 0
                batch_size: int = 64
                optim: OptimConfig = field(default_factory=OptimConfig)
                data_root: str = field(default="/data")
                name: str = field()
            """,
        "train.py": """
            from configs import TrainConfig

            cfg = TrainConfig(batch_size=32)
            print(cfg.num_workers, cfg.batch_size, cfg.optim.weight_decay, cfg.data_root, cfg.name)
            """,
    }
    assert value_at(tmp_path, files, "train.py", "cfg.num_workers") == 0
    assert value_at(tmp_path, files, "train.py", "cfg.batch_size") == 32  # the construction passes it
    assert value_at(tmp_path, files, "train.py", "cfg.optim.weight_decay") == 0.05
    assert value_at(tmp_path, files, "train.py", "cfg.data_root") == "/data"
    assert value_at(tmp_path, files, "train.py", "cfg.name") is UNKNOWN  # required: no default


@pytest.mark.parametrize(
    "use",
    [
        "cfg: TrainConfig = load_config()\nprint(cfg.num_workers)",  # annotated assignment
        "def main(cfg: TrainConfig):\n    print(cfg.num_workers)",  # annotated parameter
        "def main(cfg: 'TrainConfig'):\n    print(cfg.num_workers)",  # string annotation
    ],
)
def test_annotations_name_the_class(tmp_path, use):
    files = {
        "cfg.py": "from dataclasses import dataclass\n\n@dataclass\nclass TrainConfig:\n    num_workers: int = 0\n",
        "train.py": f"from cfg import TrainConfig\n\n{use}\n",
    }
    assert value_at(tmp_path, files, "train.py", "cfg.num_workers") == 0


def test_plain_class_and_module_instance(tmp_path):
    files = {
        "utils/config.py": """
            class Config:
                num_workers = 8
                lr = 1e-3

                def _parse(self, kwargs):
                    for k, v in kwargs.items():
                        setattr(self, k, v)

            opt = Config()
            """,
        "utils/__init__.py": "",
        "train.py": "from utils.config import opt, Config\n\nprint(opt.num_workers, Config.lr)\n",
    }
    assert value_at(tmp_path, files, "train.py", "opt.num_workers") == 8
    assert value_at(tmp_path, files, "train.py", "Config.lr") == 1e-3


def test_tap_style_class_with_base_outside_the_project(tmp_path):
    files = {
        "arg_util.py": """
            from tap import Tap

            class Args(Tap):
                workers: int = 2
                tblr: float = 1e-4
                local_out_dir_path: str = ''

                def process(self):
                    self.tblr = self.tblr * 2

            def init_dist_and_get_args() -> Args:
                return Args(explicit_bool=True).parse_args()
            """,
        "train.py": """
            import arg_util

            args: arg_util.Args = arg_util.init_dist_and_get_args()
            print(args.workers, args.tblr, args.depth)
            """,
    }
    assert value_at(tmp_path, files, "train.py", "args.workers") == 2
    assert value_at(tmp_path, files, "train.py", "args.tblr") is UNKNOWN  # a method reassigns it
    assert value_at(tmp_path, files, "train.py", "args.depth") is UNKNOWN  # Tap may declare it


def test_hf_argument_parser_tuple(tmp_path):
    files = {
        "train.py": """
            from dataclasses import dataclass, field
            from transformers import HfArgumentParser, TrainingArguments

            @dataclass
            class DataArguments:
                preprocessing_num_workers: int = field(default=1)
                max_seq_length: int = 512

            parser = HfArgumentParser((DataArguments, TrainingArguments))
            data_args, training_args = parser.parse_args_into_dataclasses()
            print(data_args.max_seq_length, data_args.preprocessing_num_workers, training_args.seed)
            """,
    }
    assert value_at(tmp_path, files, "train.py", "data_args.max_seq_length") == 512
    assert value_at(tmp_path, files, "train.py", "data_args.preprocessing_num_workers") == 1
    # transformers' own dataclass is not the project's: unknown here (the frameworks' facts know it)
    assert value_at(tmp_path, files, "train.py", "training_args.seed") is UNKNOWN


@pytest.mark.parametrize(
    "use",
    [
        "cfg = TrainConfig()\ncfg.num_workers = 4\nprint(cfg.num_workers)",  # set on the instance
        "cfg = TrainConfig(**overrides)\nprint(cfg.num_workers)",  # opaque construction
        "cfg = TrainConfig(4)\nprint(cfg.num_workers)",  # positional field
        "cfg = make()\nprint(cfg.num_workers)",  # a helper's result
        "cfg = TrainConfig()\nif flag:\n    cfg = Other()\nprint(cfg.num_workers)",  # two classes
        "cfg = TrainConfig()\nsetattr(cfg, name, 2)\nprint(cfg.num_workers)",
    ],
)
def test_unknown_stays_unknown(tmp_path, use):
    files = {
        "cfg.py": """
            from dataclasses import dataclass

            @dataclass
            class TrainConfig:
                num_workers: int = 0

            @dataclass
            class Other:
                num_workers: int = 8
            """,
        "train.py": f"from cfg import TrainConfig, Other\n\n{use}\n",
    }
    assert value_at(tmp_path, files, "train.py", "cfg.num_workers") is UNKNOWN


def test_post_init_reassignment_is_unknown(tmp_path):
    files = {
        "train.py": """
            from dataclasses import dataclass

            @dataclass
            class Config:
                num_workers: int = 0

                def __post_init__(self):
                    self.num_workers = min(self.num_workers, 4)

            cfg = Config()
            print(cfg.num_workers)
            """
    }
    assert value_at(tmp_path, files, "train.py", "cfg.num_workers") is UNKNOWN


def test_td102_reads_a_dataclass_config_of_another_module(tmp_path):
    files = {
        "config.py": """
            from dataclasses import dataclass

            @dataclass
            class Config:
                batch_size: int = 64
                num_workers: int = 0
            """,
        "train.py": textwrap.dedent("""
            import torch
            from torch.utils.data import DataLoader
            from config import Config

            cfg = Config()
            model = torch.nn.Linear(4, 2).cuda()
            loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.num_workers)
            """)
        + LOOP,
    }
    result = check(tmp_path, files, "train.py", ["TD102"])
    assert rows(result) == [("TD102", 7)]
    assert "num_workers" in result.findings[0].message
    # the same script with a config that starts workers: silent
    files["config.py"] = files["config.py"].replace("num_workers: int = 0", "num_workers: int = 8")
    assert rows(check(tmp_path, files, "train.py", ["TD102"])) == []


HF_SCRIPT = """
import sys
from dataclasses import dataclass, field

import transformers
from transformers import HfArgumentParser, Trainer


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="gpt2")


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    model_max_length: int = field(default=512)


def train():
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()
    model = transformers.AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    trainer = Trainer(model=model, args=training_args, train_dataset=train_set)
    trainer.train()
"""


def test_td102_hf_arguments_parsed_from_the_command_line_hold_their_defaults(tmp_path):
    result = check(tmp_path, {"train.py": HF_SCRIPT}, "train.py", ["TD101", "TD102", "TD103"])
    assert rows(result) == [("TD102", 20)]
    assert "`dataloader_num_workers` defaults to 0" in result.findings[0].message


def test_hf_subclass_default_and_file_parses(tmp_path):
    workers = HF_SCRIPT.replace(
        "model_max_length: int = field(default=512)",
        "model_max_length: int = field(default=512)\n    dataloader_num_workers: int = 4",
    )
    # the project's subclass starts 4 workers without persistence: TD103, not TD102 (and no fix
    # inserted into the parse call)
    result = check(tmp_path, {"train.py": workers}, "train.py", ["TD102", "TD103"])
    assert rows(result) == [("TD103", 21)]
    assert result.findings[0].fix is None
    # values that may come from a JSON file are not the defaults'
    from_json = HF_SCRIPT.replace(
        "    model_args, training_args = parser.parse_args_into_dataclasses()\n",
        "    if sys.argv[1].endswith('.json'):\n"
        "        model_args, training_args = parser.parse_json_file(sys.argv[1])\n"
        "    else:\n"
        "        model_args, training_args = parser.parse_args_into_dataclasses()\n",
    )
    assert rows(check(tmp_path, {"train.py": from_json}, "train.py", ["TD102"])) == []
    # no Trainer trains in the file: nothing to say
    no_train = HF_SCRIPT.replace("    trainer.train()\n", "")
    assert rows(check(tmp_path, {"train.py": no_train}, "train.py", ["TD102"])) == []


OPTIONS_PACKAGE = {
    "options/__init__.py": "",
    "options/base_options.py": """
        import argparse


        class BaseOptions:
            def initialize(self, parser):
                parser.add_argument("--nThreads", default=4, type=int)
                parser.add_argument("--batchSize", type=int, default=1)
                parser.add_argument("--gpu_ids", type=str, default="0")
                return parser

            def parse(self):
                parser = self.initialize(argparse.ArgumentParser())
                opt = parser.parse_args()
                opt.gpu_ids = [int(i) for i in opt.gpu_ids.split(",")]
                return opt
        """,
    "options/train_options.py": """
        from .base_options import BaseOptions


        class TrainOptions(BaseOptions):
            def initialize(self, parser):
                BaseOptions.initialize(self, parser)
                parser.add_argument("--lr", type=float, default=0.0002)
                parser.add_argument("--nThreads", default=4, type=int)
                return parser
        """,
}


def test_option_classes_of_another_package(tmp_path):
    files = {
        **OPTIONS_PACKAGE,
        "train.py": "from options.train_options import TrainOptions\n\nopt = TrainOptions().parse()\nprint(opt.nThreads, opt.lr, opt.gpu_ids, opt.missing)\n",
    }
    assert value_at(tmp_path, files, "train.py", "opt.nThreads") == 4
    assert value_at(tmp_path, files, "train.py", "opt.lr") == 0.0002
    assert value_at(tmp_path, files, "train.py", "opt.gpu_ids") is UNKNOWN  # changed after parsing
    assert value_at(tmp_path, files, "train.py", "opt.missing") is UNKNOWN


@pytest.mark.parametrize(
    "use",
    [
        "from opts import get_args_parser\n\nargs = get_args_parser().parse_args()",
        "import argparse\nfrom opts import get_args_parser\n\n"
        "parser = argparse.ArgumentParser('x', parents=[get_args_parser()])\nargs = parser.parse_args()",
        "from opts import parse_args\n\nargs = parse_args()",
        "from opts import get_args_parser\n\nargs, _ = get_args_parser().parse_known_args()",
    ],
)
def test_parsers_built_in_another_module(tmp_path, use):
    files = {
        "opts.py": """
            import argparse


            def get_args_parser():
                parser = argparse.ArgumentParser(add_help=False)
                parser.add_argument("--workers", default=0, type=int)
                parser.add_argument("--lr", default=0.1, type=float)
                return parser


            def parse_args():
                return get_args_parser().parse_args()
            """,
        "train.py": use + "\nprint(args.workers, args.lr)\n",
    }
    assert value_at(tmp_path, files, "train.py", "args.workers") == 0
    files["train.py"] += "args.lr = args.lr * 2\nprint(args.lr)\n"
    assert value_at(tmp_path, files, "train.py", "args.lr") is UNKNOWN  # the script changes it


def test_td102_with_the_parser_in_an_options_module(tmp_path):
    files = {
        **OPTIONS_PACKAGE,
        "train.py": textwrap.dedent("""
            import torch
            from torch.utils.data import DataLoader
            from options.train_options import TrainOptions

            opt = TrainOptions().parse()
            model = torch.nn.Linear(4, 2).cuda()
            loader = DataLoader(dataset, batch_size=opt.batchSize, shuffle=True, num_workers=int(opt.nThreads))
            """)
        + LOOP,
    }
    assert rows(check(tmp_path, files, "train.py", ["TD102"])) == []  # 4 workers
    files["options/base_options.py"] = files["options/base_options.py"].replace(
        '"--nThreads", default=4', '"--nThreads", default=0'
    )
    files["options/train_options.py"] = files["options/train_options.py"].replace(
        '"--nThreads", default=4', '"--nThreads", default=0'
    )
    result = check(tmp_path, files, "train.py", ["TD102"])
    assert rows(result) == [("TD102", 7)]
