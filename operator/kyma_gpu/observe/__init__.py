"""Observation: paged LISTs and WATCHes folded into a store of compact facts."""

from kyma_gpu.observe.informer import Informer, Source
from kyma_gpu.observe.observers import Observers
from kyma_gpu.observe.store import Entry, Store

__all__ = ("Entry", "Informer", "Observers", "Source", "Store")
