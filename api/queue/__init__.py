"""The durable search queue on PostgreSQL: searches are procrastinate tasks.

- The API records a search's job row and defers its task in one transaction
  (`api.queue.enqueue.submit_search`): an acknowledged request always has its task.
- `meshplan worker` processes (`api.queue.worker`) run the tasks (`api.queue.tasks`): search,
  store the plan, finish the job, once (the job row is locked while the plan is stored).
- A worker that stops sending heartbeats is presumed dead; a periodic task retries its
  running searches on another worker (`api.queue.tasks.QueueTasks.retry_stalled`).
- SIGTERM: a worker takes no new task, gives its running ones `worker_shutdown_grace_s`, then
  re-queues what is still running and exits.

SQLite has no queue: there the API's in-process pool (`api.workers`) runs searches.
"""
