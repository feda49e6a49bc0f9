"""Errors a user can cause, each naming the place in the input that is wrong."""

from __future__ import annotations


class GraphError(Exception):
    """A problem with a tensor program, located in its source.

    ``location`` is a JSON path such as ``nodes[7].args[1]`` (or ``line 3 column 5``
    for unparsable JSON); ``source`` is the file it came from, when there is one.
    """

    def __init__(self, message: str, location: str = "", source: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.source = source

    def within(self, prefix: str, source: str = "") -> GraphError:
        """A copy of this error whose location is nested under ``prefix`` (e.g. ``nodes[7]``)."""
        loc = self.location
        location = prefix if not loc else f"{prefix}{'' if loc.startswith('[') else '.'}{loc}" if prefix else loc
        return type(self)(self.message, location, self.source or source)

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.source, self.location) if part)
        return f"{where}: {self.message}" if where else self.message


class FormatError(GraphError):
    """The file is not valid JSON or not shaped like a graph.json document."""


class TensorNameError(GraphError):
    """A name refers to no tensor, or two tensors share a name."""


class CycleError(GraphError):
    """Nodes depend on each other in a loop."""


class ShapeError(GraphError):
    """Shapes, axes or sizes do not fit the operation."""


class DTypeError(GraphError):
    """An unknown dtype, or a dtype the operation does not accept."""


class InitError(GraphError):
    """An input's initial value cannot be produced (bad spec, missing or mismatched file)."""


class InputError(GraphError):
    """An array given for a program input is missing or has the wrong shape or dtype."""
