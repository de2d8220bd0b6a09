"""Read-through properties: an attribute that is an attribute of what the object holds.

``Session.work_dir`` is its AsyncSession's, a managed entry's ``busy`` its session's, an
AsyncSession's ``timeout`` its options'. Each such attribute is one typed line,
``work_dir = ReadThrough[Path]("_async.work_dir")``, instead of a hand-written getter
per name: a real read-only :class:`property` (``help()`` and the API pages show its doc;
assigning to it raises the property's own ``AttributeError``), typed for checkers.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, overload

__all__ = ["ReadThrough"]

T = TypeVar("T")


class ReadThrough(property, Generic[T]):
    """A read-only property whose value is ``path`` (``"_async.work_dir"``) read on the
    instance, with ``doc`` as its docstring."""

    def __init__(self, path: str, doc: str | None = None) -> None:
        super().__init__(operator.attrgetter(path), doc=doc)
        self.__doc__ = doc  # else this class's own docstring would shadow the property's

    @overload
    def __get__(self, instance: None, owner: type[Any], /) -> ReadThrough[T]: ...

    @overload
    def __get__(self, instance: Any, owner: type[Any] | None = None, /) -> T: ...

    def __get__(self, instance: Any, owner: type[Any] | None = None, /) -> Any:
        return super().__get__(instance, owner)

    if TYPE_CHECKING:  # read-only for checkers too, as a property without a setter is

        def __set__(self, instance: Any, value: NoReturn, /) -> None: ...
