"""A sweep's ``settings:`` entries: 'all24' | 'all36' | a 4-character code, and the 2-character class / domain
halves of ``class_settings`` x ``domain_settings`` (docs/streams.md); anything else is one-line refused."""

from __future__ import annotations

from typing import Any

from unitta.schema import hint
from unitta.streams.settings import SETTING_CODES_24, SETTING_CODES_36, is_half_code, is_setting_code

__all__ = ["expand_settings", "check_half"]


def expand_settings(value: Any) -> list[str]:
    """'all24' | 'all36' | a 4-character code -> a list of codes (docs/streams.md); other input is refused."""
    if value == "all24":
        return list(SETTING_CODES_24)
    if value == "all36":
        return list(SETTING_CODES_36)
    if not isinstance(value, str):
        raise ValueError(f"a setting is a 4-character code such as 'nui1', or 'all24'/'all36', got {value!r}")
    code = value
    if not is_setting_code(code):
        raise ValueError(
            f"invalid setting {code!r}{hint(code, SETTING_CODES_36)}: a code is <class corr><class imb>"
            f"<domain corr><domain imb> with corr in i,n,1 and imb in 1,u (e.g. 'nui1'), or 'all24'/'all36'"
        )
    return [code]


def check_half(code: Any, which: str) -> None:
    if not is_half_code(code):
        raise ValueError(
            f"invalid {which} setting {code!r}: a 2-character <corr><imb> with corr in i,n,1 and imb in 1,u (e.g. 'n1')"
        )
