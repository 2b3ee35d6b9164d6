"""One registry per kind of plug-in (schedulers, launchers, failure kinds): a decorator that
registers a class under its `name` and refuses a duplicate, lookups with a clear error, and the
list of names that scenario validation and CLI choices are generated from."""
from typing import Dict, Generic, List, TypeVar

T = TypeVar("T")


class RegistryError(KeyError):
    def __str__(self):
        return self.args[0]


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: Dict[str, T] = {}

    def register(self, cls):
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

    def __contains__(self, name) -> bool:
        return name in self._items
