"""One registry per kind of plug-in (schedulers, launchers, failure kinds).

A registry has a decorator that registers a class under its `name` and refuses a duplicate. Its
lookups fail with a clear error. Its list of names is what scenario validation and CLI choices are
generated from."""
from typing import Dict, Generic, List, TypeVar, cast

T = TypeVar("T")
C = TypeVar("C", bound=type)  # a registered class, handed back as it is


class RegistryError(KeyError):
    def __str__(self) -> str:
        return cast(str, self.args[0])  # the message this module gives it


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: Dict[str, T] = {}

    def register(self, cls: C) -> C:
        """Class decorator: registers one instance of `cls` under `cls.name`."""
        obj = cls()
        if obj.name in self._items:
            raise RegistryError(f"{self.kind} {obj.name!r} is already registered "
                                f"(by {type(self._items[obj.name]).__name__})")
        self._items[obj.name] = obj
        return cls

    def unregister(self, name: str) -> None:
        del self._items[name]

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(f"unknown {self.kind} {name!r} (known: {', '.join(self.names())})") from None

    def names(self) -> List[str]:
        """Registered names in registration order."""
        return list(self._items)

    def all(self) -> List[T]:
        return list(self._items.values())

    def __contains__(self, name: object) -> bool:
        return name in self._items
