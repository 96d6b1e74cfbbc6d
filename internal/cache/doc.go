// Package cache is the manager's informer cache: controller-runtime's cache, built so that a
// manager holds every LockRequest of a cluster (100,000 in a 256Mi container) and decides on what
// it has itself just written. It is what the controllers read; this comment is what it promises
// them. A reader needs nothing below this door, and a change below it keeps these promises or
// changes this comment and its readers with it.
//
// The door is a few names: Options and New make the cache (ctrl.Options.Cache and NewCache:
// cmd/manager and every test harness that runs the manager use both), KeyIndex names the one index
// the cache treats as a deep queue's, and an Overlay (NewOverlay) serves a reconciler its own
// writes. The package imports api/v1alpha1, internal/packed, internal/watchjson, internal/queue
// (for the order of resourceVersions) and pkg/client (the relisting informer), never
// internal/controller: the controllers import it.
//
// # What is cached, and what is not
//
// Every LockRequest of the cluster, unscoped: New refuses options that scope LockRequests by
// namespace or selector (its watch is of them all; the list would keep to the scope and the watch
// would not). A LockRequest is cached without its managedFields, its labels and every annotation
// outside locks.turnstile.dev/ (the creator stamp the holder Lease check reads is kept; kubectl's
// last-applied copy of the object is not): no decision selects or reads them, and the manager
// writes LockRequests only through the status subresource or a patch of the fields it changes, so
// nothing it writes is lost. A reader that needs a dropped field reads it live, or changes the trim
// here. A ProjectLock, which the lock controller updates whole, loses only its managedFields (and
// the spare room of its queue's slice); every other kind its managedFields alone. The strings
// thousands of objects share (namespaces, targets, commands, condition types, reasons, fixed
// messages) are stored once. Trimming an object twice writes nothing (the transform meets objects
// the store already holds).
//
// # Compaction is exact
//
// The LockRequest informer stores each request compacted (a waiting request as a pipeline applies
// it: 800 bytes, against 1,794 trimmed): what is packed unpacks to itself — expanded, a request is
// reflect.DeepEqual to the one stored, its times in their location — and what cannot be packed
// exactly (a time in another zone or with a monotonic reading, a condition type or status the codes
// do not know, a uid not written as the API server writes one, two targets, labels, a deletion) is
// kept as it came. So every object is stored and comes back as it was. TestCompactEveryField sets
// every field of the API type, found by reflection (a field added to the API later too: the test
// fails until compaction packs it or keeps it), and TestCompactRoundTrip fills them at random.
//
// # Readers see LockRequests, never the compact form
//
// Gets, lists, index lookups, index functions, event handlers and tombstones all get *LockRequest,
// expanded: a new object each time, but for two shared ones. A lookup of 64 or more requests in
// KeyIndex (a deep queue, which the lock controller lists on every reconcile without copying) hands
// out expansions the cache keeps until the request changes; and every event handler of one event
// gets the same expansion. Shared objects are read, never changed: a reader that lists with
// client.UnsafeDisableDeepCopy copies what it writes.
//
// # The fanout's replay rule
//
// The LockRequest informer's handlers share one client-go listener (client-go gives each its own,
// whose buffer grows to hold the whole store when a handler is added after the sync and never
// shrinks). A handler added before the cache starts joins at once. A handler added after the start
// is replayed the store, an initial add of every request, by a goroutine, then joins; its
// registration has synced once it has joined and the first list has been handed on. While a replay
// runs no event is handed on to any handler: every change the store shows is in the replay or
// handed on after it, and none is lost. The store may still change during the replay, so an event
// already reflected in it can follow it (an update of a request it listed, a delete of one it did
// not): a handler added after the start must be level-triggered (it enqueues a key, whose reconcile
// reads the cache), and a handler that counts events (the controllers' request counts) must be
// added before the start. A handler that asks for a resync period other than the informer's gets a
// listener of its own from client-go, expanded requests too.
//
// # The overlay: read your writes
//
// An Overlay remembers what its reconciler has just written. Read through it, a cached object older
// than our write — resourceVersions of one resource are comparable and grow with every write
// (KEP-5504) — is served as our write, however many writes the cache is behind; a cache that shows
// our write, or a newer one by someone else, is served as it is and the memory dropped. A write
// that failed is forgotten (ForgetRequest, ForgetProjectLock), a memory lasts 30 s at most, and a
// deletion the watch reported is remembered, with the request's last token when the watch saw its
// last state. Writes still carry their resourceVersion, so a wrong overlay could cost a 409, never
// a double grant (docs/protocol.md). EchoesRequest and EchoesProjectLock tell a watch event that is
// exactly the version a key's own reconcile wrote, which has nothing new for that key.
//
// # The watch
//
// Every informer relists at once when a watch is answered 410 Gone (pkg/client.NewInformer), not
// after client-go's backoff: after an API server restart every watch is. LockRequests are listed as
// controller-runtime lists them and watched once, through internal/watchjson, which reads each
// event once where client-go's decoder reads it about seven times (half the manager's CPU on a cold
// start at 100,000 requests). Every other kind is watched as controller-runtime watches it.
//
// # What it costs
//
// At 100,000 requests (docs/performance.md): the compact requests about 50 MiB, the store and its
// indexes about 31 MiB, the kept expansions at most 16,384 requests, the overlay the requests
// written in the last 30 s compacted (12.6 MiB at 100,000 fresh ones). The fanout saved the 12 MiB
// of listener buffers the six handlers kept, and a replay expands each request once for all the
// handlers that join together, not once for each.
//
// # A new cache trick
//
// It goes here, behind this door: its promise written above, its guards marked and their mutants in
// hack/mutants/cache.go, its tests in this package (plain `go test`, no API server: client-go's
// fake sources and an httptest server stand in), and the controllers left as they were.
package cache
