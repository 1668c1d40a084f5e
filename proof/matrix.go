package proof

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"github.com/opensubstrate/sandbox/tier"
)

// Missing is the state of a tier a cell does not give (a cell that
// skips a tier is read, not trusted: the matrix says so).
const Missing State = "missing"

// Row is one target of the matrix: its latest cell in log order, and
// how many cells of it the log holds.
type Row struct {
	Target Target
	Key    string        // the target's key: OS, kernel, arch, CPU, virtualisation, accelerators
	Cells  int           // how many cells of this target the log holds
	Entry  int           // the latest cell's entry index
	Latest *Cell         // the latest cell
	Tiers  [8]TierResult // by tier, S0 to S7; State Missing where the cell gives none
}

// Matrix is a proof log rendered as a table: one row per target, one
// column per tier.
type Matrix struct {
	Rows    []Row
	Entries int // the log's size
}

// targetParts are what make two cells the same target's: OS, kernel,
// arch, CPU, virtualisation and accelerators (in any order).
func targetParts(t Target) []string {
	acc := slices.Clone(t.Accelerators)
	slices.Sort(acc)
	return []string{t.OS, t.Kernel, t.Arch, t.CPU, t.Virtualisation, strings.Join(acc, ", ")}
}

// TargetKey is a target's name in the matrix: its OS, kernel, arch, CPU,
// virtualisation and accelerators, those it gives, joined by " · ".
func TargetKey(t Target) string {
	var ps []string
	for _, p := range targetParts(t) {
		if p != "" {
			ps = append(ps, p)
		}
	}
	return strings.Join(ps, " · ")
}

// NewMatrix makes the matrix of a log's cells: for each target its
// latest cell (the last in log order), rows sorted by target key. Of a
// tier a cell gives twice, the first result counts; tiers outside the
// ladder are ignored.
func NewMatrix(l *Log) Matrix {
	byKey := map[string]*Row{}
	for i, c := range l.Cells {
		if c == nil {
			continue
		}
		k := fmt.Sprintf("%q", targetParts(c.Target)) // unambiguous, unlike the name
		r := byKey[k]
		if r == nil {
			r = &Row{Key: TargetKey(c.Target)}
			byKey[k] = r
		}
		r.Cells++
		r.Entry, r.Latest, r.Target = i, c, c.Target
	}
	m := Matrix{Entries: l.Size()}
	for _, r := range byKey {
		var seen [8]bool
		for t := range r.Tiers {
			r.Tiers[t] = TierResult{Tier: tier.Tier(t), State: Missing}
		}
		for _, tr := range r.Latest.Tiers {
			if !tr.Tier.Valid() || seen[tr.Tier] {
				continue
			}
			seen[tr.Tier] = true
			r.Tiers[tr.Tier] = tr
		}
		m.Rows = append(m.Rows, *r)
	}
	slices.SortFunc(m.Rows, func(a, b Row) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), a.Entry-b.Entry)
	})
	return m
}

// Why is what a tier's result says beside its state: the run for a
// green one, the error for a red one, the reason for an unavailable one.
func Why(tr TierResult) string {
	switch tr.State {
	case Green:
		s := tr.Run
		if tr.Executor != "" {
			s = tr.Executor + " " + s
		}
		return s
	case Red:
		if tr.Executor != "" {
			return tr.Executor + ": " + tr.Error
		}
		return tr.Error
	case Unavailable:
		return tr.Reason
	case Missing:
		return "the cell gives no result for this tier"
	}
	return "an unknown state"
}

// Label is a state's word in a table; red is in capitals, to stand out.
func Label(s State) string {
	switch s {
	case Green:
		return "green"
	case Red:
		return "RED"
	case Unavailable:
		return "unavailable"
	case Missing:
		return "missing"
	}
	return "unknown"
}

// Clean is s made safe for a terminal: control characters (escape
// sequences among them) replaced by U+FFFD, at most n runes (n > 0).
func Clean(s string, n int) string {
	var b strings.Builder
	i := 0
	for _, r := range s {
		if i == n && n > 0 {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) || r == unicode.ReplacementChar || unicode.Is(unicode.Bidi_Control, r) {
			r = unicode.ReplacementChar
		}
		b.WriteRune(r)
		i++
	}
	return b.String()
}

// summary is the row's count of cells, for every format.
func (r Row) summary() string {
	if r.Cells == 1 {
		return fmt.Sprintf("1 cell (entry %d)", r.Entry)
	}
	return fmt.Sprintf("latest of %d cells (entry %d)", r.Cells, r.Entry)
}

// Text writes the matrix as a plain table, each row's reasons below it.
func (m Matrix) Text(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "proof matrix: %d targets, %d cells\n\n", len(m.Rows), m.Entries)
	width := len("target")
	keys := make([]string, len(m.Rows))
	for i, r := range m.Rows {
		keys[i] = Clean(r.Key, 80)
		width = max(width, len([]rune(keys[i])))
	}
	fmt.Fprintf(&b, "%-*s", width, "target")
	for _, t := range tier.All {
		fmt.Fprintf(&b, "  %-11s", t)
	}
	b.WriteString("\n")
	for i, r := range m.Rows {
		b.WriteString(keys[i] + strings.Repeat(" ", width-len([]rune(keys[i]))))
		for _, tr := range r.Tiers {
			fmt.Fprintf(&b, "  %-11s", Label(tr.State))
		}
		fmt.Fprintf(&b, "\n  %s\n", r.summary())
		for _, tr := range r.Tiers {
			fmt.Fprintf(&b, "  %s %s: %s\n", tr.Tier, Label(tr.State), Clean(Why(tr), 160))
		}
	}
	out := strings.ReplaceAll(b.String(), " \n", "\n")
	for strings.Contains(out, " \n") {
		out = strings.ReplaceAll(out, " \n", "\n")
	}
	_, err := io.WriteString(w, out)
	return err
}

// mdEscape makes s one Markdown table cell's text: HTML's special
// characters as entities, Markdown's punctuation backslash-escaped, no
// line breaks.
func mdEscape(s string) string {
	var b strings.Builder
	for _, r := range Clean(s, 300) {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '\\', '`', '*', '_', '[', ']', '|', '#', '!', '~':
			b.WriteRune('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Markdown writes the matrix as a GitHub-flavoured Markdown table.
func (m Matrix) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Proof matrix\n\n%d targets, %d cells.\n\n| target | cells |", len(m.Rows), m.Entries)
	for _, t := range tier.All {
		fmt.Fprintf(&b, " %s |", t)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(tier.All)) + "\n")
	for _, r := range m.Rows {
		fmt.Fprintf(&b, "| %s | %s |", mdEscape(r.Key), mdEscape(r.summary()))
		for _, tr := range r.Tiers {
			switch tr.State {
			case Green:
				fmt.Fprintf(&b, " ✅ green: %s |", mdEscape(Why(tr)))
			case Red:
				fmt.Fprintf(&b, " ❌ **RED**: %s |", mdEscape(Why(tr)))
			case Unavailable:
				fmt.Fprintf(&b, " ⬜ unavailable: %s |", mdEscape(Why(tr)))
			default:
				fmt.Fprintf(&b, " ❔ %s: %s |", mdEscape(Label(tr.State)), mdEscape(Why(tr)))
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
