"""The config keys of a cell, made from the facts of its fields (``unitta.cell.FIELDS``, read from ``Cell``).

A sweep config carries ``CellFields`` at its top level (the fields every cell shares; the gridded ones are
lists there: datasets, sampler, protocol, delta, seeds, batch sizes); a tune or select config carries a
``CellSpec`` under ``cell:`` (every field but the method). Each key's value goes through the table's check,
each value of a gridded list too, so a bad value (``severity: 9``, an unknown factor) is the same one-line
error, exit code 2, in every config (docs/results.md, "Configs"); ``CellSpec`` then builds its ``Cell``, whose
own checks cover the fields taken together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationInfo, create_model, field_validator, model_validator

from unitta.cell import FIELDS, Cell
from unitta.cell.fields import CellField
from unitta.cell.sampler_keys import check_sampler_keys
from unitta.schema import Strict, check_distinct
from unitta.streams import CCC_SAMPLER
from unitta.streams.ccc import check_ccc

__all__ = ["CellFields", "CellSpec"]

# A config key -> its field: the field's own name, or the list a sweep grids it over (``CellField.grid``).
_FIELD_OF_KEY: dict[str, CellField] = {**{f.grid: f for f in FIELDS if f.grid}, **{f.name: f for f in FIELDS}}


def _keys(config: str) -> dict[str, Any]:
    """The pydantic fields of the table's fields whose ``config`` is ``config``."""
    return {
        f.name: (f.type, Field(default_factory=f.factory) if f.factory is not None else f.default)
        for f in FIELDS if f.config == config
    }


def _check_grid(field: CellField, values: list) -> list:
    """A gridded key's values: at least one, each through the field's check, none twice."""
    return check_distinct([field.check(v) if field.check is not None else v for v in values])


class _Checked(Strict):
    """Every key of a cell field goes through its field's check (``Cell``'s ``cell_field``); the keys themselves
    are made from ``FIELDS`` (``CellFields`` below). The rules read these keys (a sweep lists its samplers)."""

    if TYPE_CHECKING:  # declared for readers and type checkers; pydantic's fields are ``CellFields``' (below)
        sampler: str | list[str]
        factors: dict[str, float]
        S: int | None
        length: int | None
        ccc: dict[str, Any] | None

    @field_validator("*")
    @classmethod
    def _table_check(cls, value: Any, info: ValidationInfo) -> Any:
        field = _FIELD_OF_KEY.get(info.field_name or "")
        if field is None or value is None:
            return value
        if field.grid == info.field_name and isinstance(value, list):
            return _check_grid(field, value)
        return field.check(value) if field.check is not None else value

    @model_validator(mode="after")
    def _sampler_keys(self) -> _Checked:
        """The keys some listed sampler must take (``unitta.cell.sampler_keys``; a sweep lists several)."""
        samplers = [self.sampler] if isinstance(self.sampler, str) else list(self.sampler)
        given = {"factors": bool(self.factors), "S": self.S is not None, "length": self.length is not None,
                 "ccc": bool(self.ccc)}
        check_sampler_keys(samplers, [key for key, present in given.items() if present])
        if self.ccc is not None and CCC_SAMPLER in samplers:  # a sweep passes ccc to its ccc cells only: checked here
            check_ccc(self.ccc, self.length)
        return self

    def cell_fields(self) -> dict[str, Any]:
        """These fields as ``Cell`` keyword arguments (fresh copies of the mappings)."""
        return {
            name: (dict(v) if isinstance(v := getattr(self, name), dict) else v) for name in CellFields.model_fields
        }


if TYPE_CHECKING:
    class CellFields(_Checked):
        """The shared keys (made from ``FIELDS`` at run time)."""
else:
    CellFields = create_model(
        "CellFields", __base__=_Checked, __module__=__name__, **_keys("shared"),
        __doc__="The fields every cell of a config shares (``Cell`` says what each means).",
    )


class _OneCell(CellFields):
    @model_validator(mode="before")
    @classmethod
    def _no_method(cls, data: Any) -> Any:
        if isinstance(data, dict) and "method" in data:
            raise ValueError("'method' is set by 'methods' (or objective.gap), not in 'cell'")
        return data

    @model_validator(mode="after")
    def _as_cell(self) -> _OneCell:
        self.cell()  # the checks of the fields taken together (a sampler's fixed setting, delta, ccc, ...)
        return self

    def cell(self, **changes: Any) -> Cell:
        """The ``Cell`` of this spec with ``changes`` applied (e.g. method=...)."""
        fields = {**self.cell_fields(), **{name: getattr(self, name) for name in _keys("cell")}}
        fields["method_kwargs"] = dict(fields["method_kwargs"])
        return Cell(**{**fields, **changes})


if TYPE_CHECKING:
    class CellSpec(_OneCell):
        """The keys of one cell (made from ``FIELDS`` at run time)."""

        num_threads: int | None  # read by the search's cell template (unitta.search.cell_template)
else:
    CellSpec = create_model(
        "CellSpec", __base__=_OneCell, __module__=__name__, **_keys("cell"),
        __doc__="One cell but its method (a tune / select config's ``cell:``; the methods come from elsewhere).",
    )
