"""What accelerator the watched run can use, as a small value object that tests can fake.

GPU-only rules (TD101, TD201, TD306, TD401, TD402) must never fire on a CPU run, and their logic
must still be testable on a CPU-only machine. Everything device-specific therefore reads a
:class:`DeviceInfo` from the session instead of asking torch directly, and tests pass
``watch(device=DeviceInfo(type="cuda", ...))``.
"""

from __future__ import annotations

from typing import Any

from traindoctor.runtime.live import fields_repr


class DeviceInfo:
    """The accelerator a run may target.

    ``type`` is ``"cuda"`` when a CUDA device is available, else ``"cpu"``. Whether the run
    actually used it is a separate fact (``Session.uses_cuda``): a GPU-only finding needs both.

    An immutable value (equal and hashing alike when the fields are equal; setting a field raises
    ``AttributeError``), written as a plain class because a ``@dataclass`` costs start-up time.
    """

    __slots__ = (
        "bf16_supported",
        "capability",
        "cuda_available",
        "device_count",
        "name",
        "platform",
        "total_memory",
        "type",
    )

    type: str
    name: str
    capability: tuple[int, int] | None
    bf16_supported: bool
    cuda_available: bool
    #: Total memory of the device in bytes (CUDA only; None when unknown).
    total_memory: int | None
    device_count: int
    #: ``"CUDA"`` or ``"ROCm"`` (AMD GPUs through ``torch.cuda``); ``""`` on a CPU run.
    platform: str

    def __init__(
        self,
        type: str = "cpu",
        name: str = "cpu",
        capability: tuple[int, int] | None = None,
        bf16_supported: bool = False,
        cuda_available: bool = False,
        total_memory: int | None = None,
        device_count: int = 0,
        platform: str | None = None,
    ) -> None:
        init = object.__setattr__
        init(self, "type", type)
        init(self, "name", name)
        init(self, "capability", capability)
        init(self, "bf16_supported", bf16_supported)
        init(self, "cuda_available", cuda_available)
        init(self, "total_memory", total_memory)
        init(self, "device_count", device_count)
        init(self, "platform", ("CUDA" if type == "cuda" else "") if platform is None else platform)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: DeviceInfo is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: DeviceInfo is immutable")

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.type,
            self.name,
            self.capability,
            self.bf16_supported,
            self.cuda_available,
            self.total_memory,
            self.device_count,
            self.platform,
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeviceInfo) and other.__class__ is self.__class__:
            return self._fields() == other._fields()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy rebuild it through __init__ (restoring slots would call __setattr__)
        return (self.__class__, self._fields())

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def is_cuda(self) -> bool:
        return self.type == "cuda"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "capability": list(self.capability) if self.capability else None,
            "bf16_supported": self.bf16_supported,
            "cuda_available": self.cuda_available,
            "total_memory": self.total_memory,
            "device_count": self.device_count,
            "platform": self.platform,
        }


def detect_device() -> DeviceInfo:
    """Describe the CUDA device the run may use, or the CPU, without initialising CUDA.

    A watch that initialised CUDA by itself would make a script that later forks CUDA workers fail
    ("Cannot re-initialize CUDA in forked subprocess") only under the doctor. So when the script
    has not initialised CUDA yet, only the device count is read (``torch.cuda.device_count()``,
    which asks NVML and initialises nothing where NVML answers) and the device's facts (name,
    capability, memory) are left unknown: the session reads them from the device the script
    works on once it has initialised CUDA itself. ROCm builds (``torch.version.hip``) are named.
    """
    import torch

    try:
        if not torch.cuda._is_compiled():  # a CPU build: nothing to ask
            return DeviceInfo(name=_cpu_name())
        platform = "ROCm" if getattr(torch.version, "hip", None) else "CUDA"
        cuda: Any = torch.cuda  # as Any: is_initialized() is unannotated
        if not cuda.is_initialized():
            count = int(torch.cuda.device_count())
            if count <= 0:
                return DeviceInfo(name=_cpu_name())
            return DeviceInfo(
                type="cuda",
                name=f"{platform} device (not initialised yet)",
                cuda_available=True,
                device_count=count,
                platform=platform,
            )
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        capability = (int(props.major), int(props.minor))
        return DeviceInfo(
            type="cuda",
            name=str(props.name),
            capability=capability,
            # native bf16 (Ampere and newer, and ROCm): is_bf16_supported() also counts emulation
            bf16_supported=platform == "ROCm" or capability >= (8, 0),
            cuda_available=True,
            total_memory=int(props.total_memory),
            device_count=int(torch.cuda.device_count()),
            platform=platform,
        )
    except Exception:  # pragma: no cover - a broken driver must not break the run
        return DeviceInfo(name=_cpu_name())


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"
