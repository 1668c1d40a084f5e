// Package cluster is how the hosts of a cluster find each other and share
// work, on PostgreSQL (the system of record, issue 31): a host joins by
// a row it signs with its key, heartbeats, and pulls jobs from a queue.
//
// A job is claimed with SELECT … FOR UPDATE SKIP LOCKED (two hosts never
// claim one job at once, and neither waits on the other's lock) under a
// lease whose end is the database's clock, never a host's. Each claim
// raises the job's fencing token; renewing, completing or failing a job
// is accepted only with the current token (ErrStaleFence otherwise), and
// anything a host does on a job's behalf elsewhere should be fenced the
// same way. So a host that stalls past its lease and comes back cannot
// complete a job another host has since claimed: its result is refused.
// (What it did meanwhile outside the database is its own: a lease makes
// the job's outcome once, not the work; work with effects fences them.)
//
// Rows are signed: a host's row by the host's key (its id is that key's
// id: a host presenting another host's id with its own key is refused);
// a job by the member that queued it. A row edited by hand, or written by
// something without the key, does not verify and is refused and logged,
// never acted on: a claimed job whose signature fails is marked failed
// with the reason.
//
// The cluster's blob store is collected (CollectBlobs, blobgc.go): what
// no kept sandbox and no untaken fleet result names is removed, while
// hosts that store objects hold the store at an epoch a collection
// raises, and are refused (ErrCollected) when they name what they
// stored after a collection began. A kept sandbox's objects are read
// from the object list its suspension stored beside its bundle
// (objects.go), and from the bundle only where no list can be used.
package cluster
