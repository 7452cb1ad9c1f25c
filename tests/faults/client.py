"""One client action with the official Python SDK, run on a host of a ``netns.Network``.

    client.py CONNECTION_STRING QUEUE send ID... | receive COUNT WAIT_SECONDS

Prints one JSON object: ``{"ok": [...ids...], "error": null | "..."}`` (the ids sent, or
received and completed, before an error, if one ends the action). Retries are off and
operations are short, so a fault shows as an error instead of a long wait
(``FAULT_CLIENT_RETRIES`` turns the SDK's retries on, for loss the SDK should ride out).
"""

import json
import os
import sys

from azure.servicebus import ServiceBusClient, ServiceBusMessage


def main() -> None:
    connection, queue, action, *rest = sys.argv[1:]
    done = []
    error = None
    try:
        with ServiceBusClient.from_connection_string(
            connection,
            retry_total=int(os.environ.get("FAULT_CLIENT_RETRIES", "0")),
            retry_backoff_factor=0.1,
        ) as client:
            if action == "send":
                with client.get_queue_sender(queue) as sender:
                    for message_id in rest:
                        sender.send_messages(
                            ServiceBusMessage(f"body of {message_id}", message_id=message_id),
                            timeout=5,
                        )
                        done.append(message_id)
            elif action == "receive":
                count, wait = int(rest[0]), float(rest[1])
                with client.get_queue_receiver(queue, max_wait_time=wait) as receiver:
                    while len(done) < count:
                        batch = receiver.receive_messages(max_message_count=count - len(done))
                        if not batch:
                            break
                        for message in batch:
                            receiver.complete_message(message)
                            done.append(message.message_id)
            else:
                raise SystemExit(f"unknown action {action}")
    except Exception as failure:  # every SDK error is an outcome to report
        error = f"{type(failure).__name__}: {failure}"
    print(json.dumps({"ok": done, "error": error}))


if __name__ == "__main__":
    main()
