"""Kombu's Redis transport, with one repair: a worker survives losing its broker.

When Redis goes away while a worker holds late-acknowledged messages, Celery closes the
connection and kombu's channel tries to put those messages back on their queues; by then
the transport has no client (``'NoneType' object has no attribute 'hostname'``, kombu 5.7)
or Redis does not answer, the error is none Celery expects, and the worker exits instead
of reconnecting (issue #27). Here the messages are left where they are: in Redis's unacked
set, from which a worker hands them out again after the visibility timeout
(``CELERY_VISIBILITY_TIMEOUT``); a Redis restarted empty has lost them either way, and the
outbox and beat send that work again.

Used for ``redis://`` brokers (``settings.CELERY_BROKER_TRANSPORT``); tests/test_celery_faults.py
kills the broker under a real worker.
"""

from __future__ import annotations

import logging

from kombu.transport import redis

logger = logging.getLogger(__name__)


class QoS(redis.QoS):
    def _closed(self) -> bool:
        """The channel of a connection Celery has closed (the broker went away): kombu's
        own calls through it fail with AttributeError, which stops the worker."""
        transport = getattr(self.channel, "connection", None)
        return transport is None or transport.client is None

    def ack(self, delivery_tag):
        # A task that ends after its connection was lost: the message cannot be acknowledged
        # through the dead channel. It stays in Redis's unacked set and runs again after the
        # visibility timeout (late acks: the portal's such tasks are idempotent).
        if self._closed():
            logger.warning("broker lost: message %s not acknowledged, runs again", delivery_tag)
            return super(redis.QoS, self).ack(delivery_tag)  # forget it here only
        return super().ack(delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        if self._closed():
            logger.warning("broker lost: message %s not rejected, runs again", delivery_tag)
            return super(redis.QoS, self).ack(delivery_tag)
        return super().reject(delivery_tag, requeue=requeue)

    def restore_unacked(self, client=None):
        try:
            return super().restore_unacked(client)
        except (AttributeError, *self.channel.connection_errors) as exc:
            logger.warning(
                "broker lost: %d unacknowledged message(s) left in Redis, handed out again "
                "after the visibility timeout (%s: %s)",
                len(self._delivered), type(exc).__name__, exc,
            )  # fmt: skip
            self._delivered.clear()
            return None


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
