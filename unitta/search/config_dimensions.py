"""A search dimension as a tune or select config spells it: a list of values, or a range ``{low, high, log, num}``
(``num`` grid points; Optuna samples the range), read into the one vocabulary of ``unitta.search_dimensions``
(a ``Choice``; a ``LogUniform`` or ``Uniform`` with its ``num``) and written back as spelt, so that a config's
hash (``RunConfig.config_hash``) and its copy in the output folder read as before (docs/analysis.md,
docs/selection.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field, PlainSerializer, model_validator

from unitta.schema import Strict
from unitta.search_dimensions import Choice, Dim, LogUniform, Uniform

__all__ = ["YamlRange", "ValuesOrRange", "FactorValuesOrRange", "spelling"]


class YamlRange(Strict):
    """A range as a config spells it: ``{low, high, log: false, num: null}`` (log: searched on a log scale)."""

    low: float
    high: float
    log: bool = False
    num: int | None = Field(default=None, ge=2)

    @model_validator(mode="after")
    def _check(self) -> YamlRange:
        if not self.low < self.high:
            raise ValueError(f"range needs low < high, got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range needs low > 0, got low={self.low}")
        return self


def _dimension(value: list[Any] | YamlRange) -> Dim:
    if isinstance(value, YamlRange):
        kind = LogUniform if value.log else Uniform
        return kind(value.low, value.high, num=value.num)
    if not value:
        raise ValueError("an empty list of values; give at least one value")
    return Choice(tuple(value))


def spelling(dim: Dim) -> list[Any] | dict[str, Any]:
    """How a config spells ``dim``: a choice as its list of values, a real range as ``{low, high, log, num}``."""
    if isinstance(dim, Choice):
        return list(dim.values)
    if isinstance(dim, (LogUniform, Uniform)):
        return {"low": dim.low, "high": dim.high, "log": isinstance(dim, LogUniform), "num": dim.num}
    raise TypeError(f"{dim!r}: a config spells a list of values or a real range")


if TYPE_CHECKING:  # what a validated config holds
    ValuesOrRange = Dim
    FactorValuesOrRange = Dim
else:  # what a config spells, read into the vocabulary and written back as spelt
    ValuesOrRange = Annotated[list[Any] | YamlRange, AfterValidator(_dimension), PlainSerializer(spelling)]
    FactorValuesOrRange = Annotated[list[float] | YamlRange, AfterValidator(_dimension), PlainSerializer(spelling)]
