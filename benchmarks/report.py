"""How the benchmarks print their figures: a table, a row per case, its label first and then
its figures and their ratios side by side in columns, each row printed as soon as it is
measured. Two spaces end a label (tests/test_benchmarks.py reads it back that way)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

Value = float | int | str | None


@dataclass(frozen=True)
class Column:
    """A column: its title in the header, the format of its numbers and the unit written
    after each."""

    title: str
    fmt: str = "9.2f"
    unit: str = ""

    @property
    def width(self) -> int:
        spec = re.match(r"[<>^]?(\d+)", self.fmt)
        number = int(spec.group(1)) if spec else 0
        return max(len(self.title), number + (len(self.unit) + 1 if self.unit else 0))

    def cell(self, value: Value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            text = "-"
        elif isinstance(value, str):
            text = value
        else:
            text = f"{value:{self.fmt}}" + (f" {self.unit}" if self.unit else "")
        return text.rjust(self.width)


def ratio_column(title: str = "ratio", fmt: str = "6.2f") -> Column:
    return Column(title, fmt)


class Table:
    """Rows of a label and one value per column; `header` prints the columns' titles."""

    def __init__(self, *columns: Column, label_width: int = 28) -> None:
        self.columns = columns
        self.label_width = label_width

    def header(self, title: str = "") -> None:
        cells = "".join(f"  {column.title.rjust(column.width)}" for column in self.columns)
        print(f"{title:{self.label_width}s}{cells}", flush=True)

    def row(self, label: str, *values: Value) -> None:
        print(self.line(label, *values), flush=True)

    def line(self, label: str, *values: Value) -> str:
        if len(values) > len(self.columns):
            raise ValueError(f"{label}: {len(values)} values for {len(self.columns)} columns")
        shown = zip(self.columns[: len(values)], values, strict=True)  # later columns left empty
        cells = "".join(f"  {column.cell(v)}" for column, v in shown)
        return f"{label:{self.label_width}s}{cells}".rstrip()
