"""The ceiling: a bare confluent-kafka consume -> parse -> map -> produce loop, no framework.

Same client settings as cadenza's defaults where they matter for cost (idempotent producer, acks=all,
linger.ms=5; classic group protocol), so the gap to cadenza is the framework's own overhead. It is
not at-least-once: offsets are committed asynchronously after each batch is handed to the producer,
without waiting for delivery; that is the point of a ceiling. Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer

from peers._app_args import parse_app_args
from peers.workload import transform

BATCH = 1000


def main() -> None:
    args = parse_app_args(__doc__.splitlines()[0] if __doc__ else "raw loop")
    stopping = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "group.protocol": "classic",
        }
    )
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    )
    consumer.subscribe([args.input])
    output, loads, dumps = args.output, json.loads, json.dumps
    produce = producer.produce
    while not stopping:
        messages = consumer.consume(BATCH, 0.1)
        if not messages:
            continue
        for message in messages:
            raw = message.value()
            if message.error() is not None or raw is None:
                continue
            value = dumps(transform(loads(raw))).encode()
            while True:
                try:
                    produce(output, value, message.key())
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.poll(0)
        consumer.commit(asynchronous=True)
    producer.flush(10)
    consumer.close()


if __name__ == "__main__":
    main()
