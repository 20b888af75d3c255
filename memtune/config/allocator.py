"""The CUDA caching allocator's settings as torch will read them from the job's environment.

Two variables exist: ``PYTORCH_ALLOC_CONF`` (the current name) and ``PYTORCH_CUDA_ALLOC_CONF``
(its backward-compatible alias). torch's CUDA allocator reads ``PYTORCH_CUDA_ALLOC_CONF`` first
and consults ``PYTORCH_ALLOC_CONF`` only when the alias is unset, and it applies the current name
to CUDA reliably only from 2.11 on (2.9.1 silently ignores it); docs/allocator.md has the
details. Exactly one variable is in effect, never a merge. Megatron's own guards read only the
alias, which is why the rules need both views.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.config.versions import Version

TORCH_READS_PYTORCH_ALLOC_CONF: Version = (2, 11, 0)
# Share of the allocated peak kept free for fragmentation: without expandable segments a block
# cached for one size cannot serve another and reserved memory runs several percent above the
# allocated peak (measured set, benchmarks/measured/README.md); with them little is lost.
FRAGMENTATION_MARGIN = 0.08
FRAGMENTATION_MARGIN_EXPANDABLE = 0.02


def parse_alloc_conf(text: str | None) -> dict[str, str]:
    """``"expandable_segments:True,roundup_power2_divisions:[256:1,>:8]"`` -> key -> value.

    Commas inside brackets belong to the value, as in torch's own parser.
    """
    if not text:
        return {}
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    conf = {}
    for item in items:
        key, _, value = item.strip().partition(":")
        if key:
            conf[key.strip()] = value.strip()
    return conf


def is_true(value: str | None) -> bool:
    """torch's allocator parser takes exactly ``True`` or ``False`` for a boolean option (anything
    else stops the allocator's start-up), so only ``True`` turns one on."""
    return value == "True"


@dataclass(frozen=True)
class AllocatorSettings:
    cuda_alloc_conf: dict[str, str]  # PYTORCH_CUDA_ALLOC_CONF as written (what Megatron's guards read)
    alloc_conf: dict[str, str]  # PYTORCH_ALLOC_CONF as written
    torch_reads_alloc_conf: bool  # whether this torch applies PYTORCH_ALLOC_CONF to CUDA
    source: str | None  # the variable whose options are in effect, or None

    @property
    def options(self) -> dict[str, str]:
        """The options in effect."""
        if self.source == "PYTORCH_ALLOC_CONF":
            return self.alloc_conf
        if self.source == "PYTORCH_CUDA_ALLOC_CONF":
            return self.cuda_alloc_conf
        return {}

    @property
    def expandable_segments(self) -> bool:
        """Whether the allocator will actually run with expandable segments."""
        return is_true(self.options.get("expandable_segments"))

    @property
    def expandable_in_cuda_alloc_conf(self) -> bool:
        """What Megatron's guards see: expandable segments in ``PYTORCH_CUDA_ALLOC_CONF``."""
        return is_true(self.cuda_alloc_conf.get("expandable_segments"))

    @property
    def alloc_conf_ignored(self) -> bool:
        """``PYTORCH_ALLOC_CONF`` is set but not in effect (the alias wins, or this torch ignores it)."""
        return bool(self.alloc_conf) and self.source != "PYTORCH_ALLOC_CONF"

    @property
    def fragmentation_margin(self) -> float:
        return FRAGMENTATION_MARGIN_EXPANDABLE if self.expandable_segments else FRAGMENTATION_MARGIN


def allocator_settings(cuda_conf: str | None, new_conf: str | None, torch: Version) -> AllocatorSettings:
    reads_new = torch >= TORCH_READS_PYTORCH_ALLOC_CONF
    cuda, new = parse_alloc_conf(cuda_conf), parse_alloc_conf(new_conf)
    source: str | None = None
    if cuda_conf is not None:
        source = "PYTORCH_CUDA_ALLOC_CONF"
    elif new_conf is not None and reads_new:
        source = "PYTORCH_ALLOC_CONF"
    return AllocatorSettings(cuda, new, reads_new, source)
