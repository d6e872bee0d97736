"""The known causes of each kind of loss in bench/compare's report
(report.py's "Where rkv loses, and why"): a title and a paragraph each,
keyed by the kind of loss. {cpus} in a text is the machine's CPU count."""

REASONS = {
    "get": (
        "GET over tcp",
        "An rkv GET is one-sided: over verbs the client READs the server's memory and no "
        "server thread takes part. The tcp transport, rkv's fallback for machines without "
        "RDMA, emulates those READs: a GET whose location the client has cached is the "
        "client's write of a READ frame, the server's poller serving it from the table's "
        "memory, and the response read by the client's waiting thread itself; one whose "
        "location is not cached yet is asked of the server, whose polling thread looks the key "
        "up and returns its block with the reply (values over about 4 KiB take two READs). "
        "memcached and Redis answer a GET with one request and one response too, but "
        "an emulated READ frame (a 40-byte header each way, the access check against the "
        "registered region, the copy out of the table's memory) and the client's checks of "
        "the block (checksum, key, lease) cost more CPU per GET than their lookup does, and "
        "where a machine has no CPU to spare the CPU per operation is what decides "
        "(docs/design.md §7.4).",
    ),
    "put": (
        "PUT over tcp",
        "An rkv PUT is two messages, the WRITE of the record into the connection's staging "
        "ring and the SEND that asks for it to be applied, then the server's apply "
        "(validation, the table's update, the request cache) and its reply (docs/design.md "
        "§5.1-§5.4, §5.9); memcached and Redis take one request and answer it.",
    ),
    "wal": (
        "The write-ahead log",
        "With --durability=wal each PUT is written to RocksDB's WAL, without fsync, before it "
        "is acknowledged (docs/design.md §5.5); redis-aof appends the command to its AOF "
        "buffer and fsyncs once a second.",
    ),
    "replication": (
        "Replication",
        "rkv-r2's primary forwards each write to the shard's backup and replies once the "
        "backup has applied and acknowledged it (docs/design.md §5.7): two more messages and "
        "a second apply on the write's path. Redis applies the SET, replies, and streams it "
        "to the replica; WAIT 1 is the client's second request, answered once the replica "
        "acknowledged the stream.",
    ),
    "rmw": (
        "Read-modify-write",
        "Workload F's read-modify-write is a GET and then a compare-and-set PUT "
        "(docs/design.md §5.10), retried on a conflict, so it pays for both of the paths "
        "above.",
    ),
    "spin": (
        "Spinning",
        "rkv's polling threads and its clients' waiters spin while requests come "
        "(--poll=adaptive), and the spinning counts as the server's CPU time whether or not a "
        "request arrives during it; memcached and Redis sleep in epoll between requests. With "
        "one client thread the server waits most of the time, so rkv's CPU per operation is "
        "mostly that spinning (docs/design.md §7.4, §7.7). It buys latency where a wake-up is "
        "slow.",
    ),
    "get_verbs": (
        "GET over SoftRoCE",
        "Over verbs an rkv GET is one-sided: the client READs the key's neighbourhood and then "
        "its block (one READ when its location cache already holds the key's block), and no "
        "server thread takes part, so its floor is one or two ib_read_lat (above). On rxe a READ "
        "is not hardware: both sides' packet processing (the ICRC, a CRC32 computed in software "
        "over every packet, the copies, the veth hop) runs in the guest kernel, every instruction "
        "of it emulated, on the same two vCPUs as the clients and the stores' threads, so a READ "
        "waits behind whatever runs there (the PUTs' SENDs and applies of a mixed workload, "
        "spinning pollers) and its tail grows with them. Under emulation a process's READs also "
        "run about 40 µs slower for a while after it starts (bench/run-verbs.sh). On a NIC the "
        "READ is served by the hardware in a few microseconds without either side's CPU "
        "(bench/results/verbs-*.md set rkv's GET beside ib_read_lat, round by round).",
    ),
    "put_verbs": (
        "PUT over SoftRoCE",
        "An rkv PUT is a WRITE of the record into the connection's staging ring and a SEND that "
        "asks for it to be applied, then the server's apply (validation, the table's update, "
        "the request cache) and a reply SEND (docs/design.md §5.1-§5.4): three RDMA messages, "
        "each through rxe's emulated software path (ib_send_lat above is one SEND's half round "
        "trip), where memcached and Redis take one request and send one response through the "
        "guest's loopback TCP.",
    ),
    "spin_verbs": (
        "Spinning",
        "rkv's polling threads spin while requests come (--poll=adaptive, docs/design.md §7.3, "
        "§7.7) and the spinning counts as the server's CPU time whether or not a request "
        "arrives during it; memcached and Redis sleep in epoll between requests. Over verbs a "
        "GET takes no server thread at all (rxe serves the READ in the guest kernel, not in a "
        "thread of rkv-server), so rkv's CPU per operation is mostly its pollers' spinning "
        "between the PUTs.",
    ),
    "cpus_verbs": (
        "Shared CPUs, spinning over verbs",
        "The clients and every store process share the guest's {cpus} vCPU(s). Over verbs rkv's "
        "waits spin adaptively up to the transport's poll_spin_us (1000 µs with --poll=adaptive, "
        "docs/design.md §7.3), calling "
        "sched_yield every few empty polls, and nothing stops them on an oversubscribed machine "
        "(the tcp transport's check of the load, \"Spinning only where it pays\" in §7.4, is tcp's "
        "alone). With more runnable threads than vCPUs (4 client threads, or rkv-r2's three "
        "servers, their replication and a coordinator) the spinners take turns on the vCPUs, a "
        "yield can hand another spinner a whole time slice, and the thread whose completion has "
        "arrived waits for its turn: tails of tens to hundreds of milliseconds and a high CPU "
        "per operation, worst in rkv-r2, whose three servers' pollers spin against each other.",
    ),
    "cpus": (
        "Shared CPUs",
        "The clients and every store process share this machine's {cpus} CPU(s). With more "
        "runnable threads than CPUs (4 client threads, or rkv-r2's three servers and a "
        "coordinator) nothing of rkv spins (docs/design.md §7.4, \"Spinning only where it "
        "pays\"): its threads sleep and are woken like memcached's and Redis's, and each "
        "costs a wake-up per request. rkv-r2 also runs three servers' pollers and "
        "replication threads on those CPUs.",
    ),
}
