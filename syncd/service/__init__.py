"""The connector operations and the changes they announce.

:mod:`~syncd.service.operations` (:class:`~syncd.service.operations.ConnectorService`: what
the control API and an embedding application can do), :mod:`~syncd.service.preview` (the
first pages of a connector, nothing stored), :mod:`~syncd.service.control` (the control
messages between instances), :mod:`~syncd.service.cursors` (list cursors) and
:mod:`~syncd.service.events` (``GET /events``, fed by :mod:`~syncd.runtime.changes`).

Nothing is re-exported here: an import of the operations from this package would bring the
engine and the workers in with any of its modules.
"""
