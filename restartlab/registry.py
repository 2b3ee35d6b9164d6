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
        """Class decorator: registers one instance of `cls` under `cls.name` (and its aliases)."""
        obj = cls()
        for key in (obj.name, *getattr(obj, "aliases", ())):
            if key in self._items:
                raise RegistryError(f"{self.kind} {key!r} is already registered "
                                    f"(by {type(self._items[key]).__name__})")
        for key in (obj.name, *getattr(obj, "aliases", ())):
            self._items[key] = obj
        return cls

    def unregister(self, name: str) -> None:
        obj = self._items.pop(name)
        for key in [k for k, v in self._items.items() if v is obj]:
            del self._items[key]

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(f"unknown {self.kind} {name!r} (known: {', '.join(self.names())})") from None

    def names(self, aliases: bool = False) -> List[str]:
        """Registered names in registration order (with aliases, when asked)."""
        if aliases:
            return list(self._items)
        return [k for k, v in self._items.items() if k == v.name]

    def all(self) -> List[T]:
        return [self._items[n] for n in self.names()]

    def __contains__(self, name) -> bool:
        return name in self._items
