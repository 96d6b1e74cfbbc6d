// Package workdir is the Atlantis working-dir lock for runners that embed Turnstile's Go client.
//
// Turnstile's ProjectLocks serialize changes across pull requests and runners, but inside one
// runner replica two commands for the same pull request (a "plan" triggered twice, a plan racing
// an apply, a post-workflow hook racing the automerge cleanup) must also not touch the same
// checkout at once. Atlantis solves this with an in-memory lock keyed
// repo/pull/workspace/path; Guards is that lock, plus a blocking Lock for callers that would
// rather wait than fail, and a deletion guard so cleanup code can never remove a working dir
// under a running command.
//
// Because the guards live in memory they die with the replica. Heartbeat makes that visible to
// the rest of the cluster: each replica renews one coordination.k8s.io/v1 Lease that lists its
// held guards. When the replica dies the Lease lapses, and any LockRequest that names the Lease
// in spec.holder.lease is released by the operator (reason HolderLost). When the replica cannot
// renew in time it must assume exactly that has happened, so Guards then refuse new locks with
// ErrLeaseLost until a renewal succeeds again.
package workdir
