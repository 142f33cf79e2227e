"""The kinds of the events in a run directory's ``events/`` (:meth:`RunDir.add_event`), which both sides write and read.

Pure Python. A kind the Airflow side reacts to is named here once, for its writer and its readers alike.
"""

from __future__ import annotations

#: An operator is about to submit an application (``try_number``, ``resume_step``).
SUBMIT = "submit"
#: The application a task submitted, or attached to after a race (``application_id``, ``try_number``).
SUBMITTED = "submitted"
#: A launch that did not come up was killed (``application_id``, ``state``).
LAUNCH_FAILED = "launch_failed"
#: A driver started (``application_id``, ``spec_hash``, ``spark_version``).
APPLICATION = "application"
#: A driver ended (``application_id``, ``state``, ``exit_code``, ``seconds``).
APPLICATION_END = "application_end"
#: A driver failed (``error``, ``exit_code``).
FAILED = "failed"
#: A driver stopped on request (``step``).
STOPPED = "stopped"
#: A serving driver stopped after ``serve_idle_secs`` without a feed request.
IDLE_STOP = "idle_stop"
#: A feed request was refused unread: it asked for what the verified spec does not allow (``feed_id``, ``error``).
FEED_REFUSED = "feed_refused"
#: A node's share of the fed data (``node``, ``rows``, ``splits``: rows per split, ``balance``: per split the rows an
#: epoch feeds, ``repeated`` (balance ``pad``) and ``dropped`` (balance ``drop``), and the spill's figures).
FEED = "feed"
#: A run resumed mid-epoch trains that epoch again in full instead of skipping the batches trained already
#: (``epoch``, ``in_epoch``: those batches, ``step``, ``reason``, ``attempt``).
EPOCH_REDONE = "epoch_redone"
#: A TF cluster attempt started (``run_id``, ``attempt``).
ATTEMPT = "attempt"
#: A TF cluster attempt failed (``run_id``, ``attempt``, ``reason``, ``retrying``).
ATTEMPT_FAILED = "attempt_failed"
#: Executors of a failed attempt that did not end its tasks were dropped (``run_id``, ``attempt``, ``executors``:
#: ``executor_id``, ``host``, ``reason`` each).
EXECUTORS_DROPPED = "executors_dropped"
#: Every deciding TF node ended but Spark's stage did not within ``grace`` seconds (``run_id``, ``attempt``,
#: ``ended``: node -> the time it ended, ``grace``): the attempt was cancelled (runtime/driver/ended.py).
STAGE_HUNG = "stage_hung"
#: The stall watchdog fired (``run_id``, ``attempt``, ``timeout``, ``nodes``: ``node``, ``step``, ``secs`` each).
STALL = "stall"
