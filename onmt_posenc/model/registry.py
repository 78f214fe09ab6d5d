"""Registries of position methods by name, as OpenNMT-py registers its transforms:
`onmt_posenc.model.positions` (absolute schemes) and `onmt_posenc.model.attention`
(self-attention variants) each keep one, filled by their files' decorators."""
import importlib
import pkgutil


def registering(table, kind):
    """The decorator factory of a registry: `@register("name")` puts the class in
    `table` under `name` (and sets its `name`)."""

    def register(name):
        def decorate(cls):
            if name in table:
                raise ValueError(f"{kind} {name!r} is registered twice")
            cls.name = name
            table[name] = cls
            return cls

        return decorate

    return register


def import_every_module(package, path):
    """Import every module of a package folder, so that each registers itself."""
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{module.name}")


def check_minimums(minimums, opt):
    """Raise ValueError for an option of `minimums` ({option: its least value}, a registered
    class's `option_minimums`) set below its least value."""
    for key, least in minimums.items():
        value = getattr(opt, key, None)
        if value is not None and value < least:
            raise ValueError(f"{key} must be >= {least}, got {value}")


def settings_text(module):
    """`name=value, ...` of a registered module's `settings` (the names of the attributes that
    hold its own settings, declared by its class): its `extra_repr`, which the model print and
    the log line of what runs (hooks.model_builder) show."""
    return ", ".join(f"{name}={getattr(module, name)!r}" for name in module.settings)
