package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// Placement is best of K (docs/cluster.md): among the hosts that are
// alive, give the tier and have room, K drawn at random (all of them
// where there are no more), the one where one more run carries the
// smallest share of its host's idle power wins: a host's rated idle
// power is drawn whether it runs one sandbox or many, so a run costs
// least, in joules, where others already share it. Ties go to the host
// with more room, then to the one deciding (no forwarding), then by id.
// The inputs and the choice are the signed placement sealed into the
// record.

// DefaultK is how many hosts a placement weighs.
const DefaultK = 3

// LiveCounts is how many sandboxes each host holds live, as the
// cluster keeps them.
func (c *Cluster) LiveCounts(ctx context.Context) (map[string]int64, error) {
	return retried(ctx, c, "live sandboxes", func() (map[string]int64, error) { return c.liveCounts(ctx) })
}

func (c *Cluster) liveCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := c.pool.Query(ctx, `SELECT host, count(*) FROM cluster_sandboxes WHERE state = 'live' GROUP BY host`)
	if err != nil {
		return nil, fmt.Errorf("cluster: live sandboxes: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var h string
		var n int64
		if err := rows.Scan(&h, &n); err != nil {
			return nil, err
		}
		out[h] = n
	}
	return out, rows.Err()
}

// Place chooses among hosts (verified rows, with their live counts) the
// one a run of tier t goes to, as self decides: the chosen host and the
// unsigned placement (By left to the signer). rnd draws K of them where
// more are eligible (nil: a fresh source). Hosts whose heartbeat is
// deadAfter old or older are left out. No host eligible is an error
// naming why each was left out.
func Place(hosts []Seen, live map[string]int64, t tier.Tier, self string, k int, deadAfter time.Duration, rnd *rand.Rand) (Seen, record.Placement, error) {
	var (
		eligible []Seen
		left     []string
	)
	for _, h := range hosts {
		switch {
		case !slices.Contains(h.Tiers, t):
			left = append(left, fmt.Sprintf("%s does not give %s", h.ID()[:12], t))
		case deadAfter > 0 && h.Age >= deadAfter:
			left = append(left, fmt.Sprintf("%s has not heartbeaten for %s", h.ID()[:12], h.Age.Round(time.Second)))
		case int64(h.Capacity) <= live[h.ID()]:
			left = append(left, fmt.Sprintf("%s is full (%d of %d)", h.ID()[:12], live[h.ID()], h.Capacity))
		default:
			eligible = append(eligible, h)
		}
	}
	if len(eligible) == 0 {
		return Seen{}, record.Placement{}, fmt.Errorf("cluster: no host can take a %s sandbox: %s", t, strings.Join(left, "; "))
	}
	if k <= 0 {
		k = DefaultK
	}
	room := len(eligible)
	if len(eligible) > k {
		if rnd == nil {
			rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		}
		rnd.Shuffle(len(eligible), func(i, j int) { eligible[i], eligible[j] = eligible[j], eligible[i] })
		eligible = eligible[:k]
	}
	cands := make([]record.Candidate, len(eligible))
	for i, h := range eligible {
		n := live[h.ID()]
		cands[i] = record.Candidate{Host: h.Key, Capacity: int64(h.Capacity), Live: n, IdleMW: h.IdleMW, CostMW: h.IdleMW / (n + 1)}
	}
	best := 0
	for i := 1; i < len(cands); i++ {
		a, b := cands[i], cands[best]
		switch {
		case a.CostMW != b.CostMW:
			if a.CostMW < b.CostMW {
				best = i
			}
		case a.Capacity-a.Live != b.Capacity-b.Live:
			if a.Capacity-a.Live > b.Capacity-b.Live {
				best = i
			}
		case (eligible[i].ID() == self) != (eligible[best].ID() == self):
			if eligible[i].ID() == self {
				best = i
			}
		case eligible[i].ID() < eligible[best].ID():
			best = i
		}
	}
	c := cands[best]
	why := fmt.Sprintf("one more %s sandbox carries %d mW of its host's idle power there (%d mW over %d runs), the least of %d hosts weighed (of %d that give %s with room)",
		t, c.CostMW, c.IdleMW, c.Live+1, len(cands), room, t)
	return eligible[best], record.Placement{Host: c.Host, Tier: t.String(), Candidates: cands, Why: why}, nil
}
