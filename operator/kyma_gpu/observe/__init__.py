"""Observation: paged LISTs and WATCHes folded into a store of compact facts."""

from kyma_gpu.observe.informer import Informer, ListWatch
from kyma_gpu.observe.informers import Informers
from kyma_gpu.observe.store import Entry, Store

__all__ = ("Entry", "Informer", "Informers", "ListWatch", "Store")
