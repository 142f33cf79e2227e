"""One Keras in a node, whatever the driver's module imported at its top.

TensorFlow 2.21 has two Keras: Keras 3 (the ``keras`` package, what ``tf.keras`` means by default) and Keras 2
(``tf_keras``, what ``tf.keras`` means with ``TF_USE_LEGACY_KERAS=1``, which a node sets for ``keras="auto"`` when
tf-keras is installed). A program in TensorFlowOnSpark's shape imports ``from tensorflow.keras import Sequential``
at the top of its module: the driver, which never set ``TF_USE_LEGACY_KERAS``, pickles Keras 3's ``Sequential`` with
``main_fun``, while ``tf.keras.optimizers.Adam`` inside ``main_fun`` is Keras 2's in the node, and ``compile`` fails
(``Could not interpret optimizer identifier``).

:class:`KerasUnpickler` loads ``main_fun`` in the node with every class, function and module of the other Keras
replaced by the same public name in the Keras the node's ``tf.keras`` means (``keras.layers.Dense`` becomes
``tf_keras.layers.Dense``), and logs what it replaced. A name the node's Keras lacks stays as it was.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
from typing import IO, Any

log = logging.getLogger(__name__)

#: The root package of each Keras, and the module ``tensorflow.keras`` resolves to under Keras 3.
KERAS3, KERAS2 = "keras", "tf_keras"
KERAS3_TF_KERAS = "keras._tf_keras.keras"


def node_keras() -> str:
    """The Keras ``tf.keras`` means in this process: ``tf_keras`` or ``keras`` (from ``TF_USE_LEGACY_KERAS``)."""
    return KERAS2 if os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true") else KERAS3


def _root(module: str) -> str:
    return module.split(".", 1)[0]


def _public_names(obj: Any) -> list[str]:
    """The public names a Keras object is exported under (Keras 3: ``_api_export_path``, 2: ``_keras_api_names``)."""
    names = getattr(obj, "_api_export_path", None) or getattr(obj, "_keras_api_names", None) or ()
    names = [names] if isinstance(names, str) else list(names)
    return [n for n in names if "._legacy." not in n and not n.startswith("keras._")]


def _resolve(path: str) -> Any:
    """The object at a dotted public path such as ``tf_keras.layers.Dense`` (importing what it must)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(path)


def _module_name(name: str, target: str) -> str:
    """The module of the Keras ``target`` that stands for module ``name`` of the other Keras (or ``name``)."""
    if target == KERAS2 and (name == KERAS3 or name.startswith((KERAS3 + ".", KERAS3_TF_KERAS))):
        if name.startswith(KERAS3_TF_KERAS):
            return KERAS2 + name[len(KERAS3_TF_KERAS) :]
        if not name.startswith(KERAS3 + ".src"):
            return KERAS2 + name[len(KERAS3) :]
    if target == KERAS3 and (name == KERAS2 or name.startswith(KERAS2 + ".")) and not name.startswith(KERAS2 + ".src"):
        return KERAS3 + name[len(KERAS2) :]
    return name


class KerasUnpickler(pickle.Unpickler):
    """Unpickle with the other Keras's objects replaced by the node's (see the module's docstring).

    :param target: the Keras to load into, ``tf_keras`` or ``keras`` (default: :func:`node_keras`).
    """

    def __init__(self, file: IO[bytes], target: str | None = None) -> None:
        super().__init__(file)
        self.target = target or node_keras()
        self.other = KERAS3 if self.target == KERAS2 else KERAS2
        #: what was replaced: ``(found, taken)`` names
        self.replaced: list[tuple[str, str]] = []

    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name)
        if name == "subimport" and module.endswith("cloudpickle"):  # how cloudpickle pickles a module
            return self._subimport(found)
        if _root(module) != self.other:
            return found
        for path in _public_names(found):
            taken = self.target + path[len(_root(path)) :]
            try:
                replacement = _resolve(taken)
            except (ImportError, AttributeError):
                continue
            self.replaced.append((f"{module}.{name}", taken))
            return replacement
        return found

    def _subimport(self, subimport: Any) -> Any:
        def load(name: str) -> Any:
            wanted = _module_name(name, self.target)
            if wanted != name:
                try:
                    module = subimport(wanted)
                except ImportError:
                    return subimport(name)
                self.replaced.append((name, wanted))
                return module
            return subimport(name)

        return load


def load_main(file: IO[bytes]) -> Any:
    """Unpickle ``(main_fun, args)`` in a node, with one Keras (logged when anything was replaced)."""
    unpickler = KerasUnpickler(file)
    loaded = unpickler.load()
    if unpickler.replaced:
        names = ", ".join(f"{found} -> {taken}" for found, taken in dict(unpickler.replaced).items())
        log.warning(
            "main_fun came from the driver with %s objects, but tf.keras is %s in this node: took %s's (%s). To "
            "keep them, pass keras=%r (or import Keras inside main_fun)",
            unpickler.other,
            unpickler.target,
            unpickler.target,
            names,
            "keras3" if unpickler.other == KERAS3 else "tf_keras",
        )
    return loaded
