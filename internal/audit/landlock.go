package audit

import (
	"net"
	"slices"
	"strconv"
	"strings"
)

// MaxRecords bounds the distinct denials a Landlock collector keeps;
// past it, it only counts them. A denial identical to the one before it
// in its domain is counted on that one, and keeps nothing new.
const MaxRecords = 4096

// Denial is a request Landlock refused, Count times in a row.
type Denial struct {
	Domain   string   // the Landlock domain, as audit names it (hex)
	Blockers []string // what refused it: fs.write_file, net.connect_tcp, scope.signal, ...
	Object   string   // what was asked for: a path, host:port, a process
	Count    int
}

// Landlock sorts Landlock's records by domain.
type Landlock struct {
	denials map[string][]Denial
	kept    int
	over    map[string]int    // denials past MaxRecords, by domain
	owner   map[string]int    // the pid that created each domain
	uid     map[string]int    // the (host) uid of the process that created it
	total   map[string]uint64 // the kernel's count at each domain's end
}

// NewLandlock returns an empty collector.
func NewLandlock() *Landlock {
	return &Landlock{denials: map[string][]Denial{}, over: map[string]int{}, owner: map[string]int{}, uid: map[string]int{}, total: map[string]uint64{}}
}

// Add takes one record; records of other types are ignored.
func (l *Landlock) Add(r Record) {
	dom := r.Fields["domain"]
	if dom == "" {
		return
	}
	switch r.Type {
	case TypeLandlockAccess:
		d := Denial{Domain: dom, Blockers: strings.Split(r.Fields["blockers"], ","), Object: object(r.Fields), Count: 1}
		if ds := l.denials[dom]; len(ds) > 0 {
			if last := &ds[len(ds)-1]; last.Object == d.Object && slices.Equal(last.Blockers, d.Blockers) {
				last.Count++
				return
			}
		}
		if l.kept >= MaxRecords {
			l.over[dom]++
			return
		}
		l.kept++
		l.denials[dom] = append(l.denials[dom], d)
	case TypeLandlockDomain:
		switch r.Fields["status"] {
		case "allocated":
			if pid, err := strconv.Atoi(r.Fields["pid"]); err == nil {
				l.owner[dom] = pid
			}
			if uid, err := strconv.Atoi(r.Fields["uid"]); err == nil {
				l.uid[dom] = uid
			}
		case "deallocated":
			if n, err := strconv.ParseUint(r.Fields["denials"], 10, 64); err == nil {
				l.total[dom] = n
			}
		}
	}
}

// Report is what the kernel said about the domains one process created.
type Report struct {
	Denials  []Denial // in the kernel's order
	Unlisted int      // denials past MaxRecords: counted, not kept
	// Reported is the kernel's own count of denials, from the domains'
	// ends; Ended says whether every domain's end was seen.
	Reported uint64
	Ended    bool
}

// Domains returns the domains pid created that have logged anything.
func (l *Landlock) Domains(pid int) []string { return domainsOf(l.owner, pid) }

// DomainsOfUID returns the domains that processes of the (host) user uid
// created and that have logged anything: a run whose user is its own
// alone (an S1 run's host identity) is known by it, whichever of its
// processes made the domain.
func (l *Landlock) DomainsOfUID(uid int) []string { return domainsOf(l.uid, uid) }

func domainsOf(by map[string]int, key int) []string {
	var out []string
	for d, k := range by {
		if k == key {
			out = append(out, d)
		}
	}
	return out
}

// Of reports the denials in the domains pid created.
func (l *Landlock) Of(pid int) Report { return l.report(l.Domains(pid)) }

// OfUID reports the denials in the domains processes of uid created.
func (l *Landlock) OfUID(uid int) Report { return l.report(l.DomainsOfUID(uid)) }

func (l *Landlock) report(domains []string) Report {
	rep := Report{Ended: true}
	for _, d := range domains {
		rep.Denials = append(rep.Denials, l.denials[d]...)
		rep.Unlisted += l.over[d]
		n, ok := l.total[d]
		rep.Reported += n
		rep.Ended = rep.Ended && ok
	}
	return rep
}

// object names what a denied request asked for, from the record's fields.
func object(f map[string]string) string {
	switch {
	case f["path"] != "":
		return f["path"]
	case f["daddr"] != "" && f["dest"] != "":
		return net.JoinHostPort(f["daddr"], f["dest"])
	case f["dest"] != "":
		return "port " + f["dest"]
	case f["src"] != "":
		return "port " + f["src"]
	case f["opid"] != "":
		if c := f["ocomm"]; c != "" {
			return "pid " + f["opid"] + " (" + c + ")"
		}
		return "pid " + f["opid"]
	}
	return "?"
}
