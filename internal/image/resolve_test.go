package image

import (
	"errors"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/errs"
)

// TestResolveAmongHidesTheRest: for a caller, an image it may not use is
// not there, by every kind of reference, and no prefix counts it; the
// answer is the one a reference to nothing gets.
func TestResolveAmongHidesTheRest(t *testing.T) {
	mine := Image{ID: "sha256:abcd1" + strings.Repeat("0", 59), Manifest: "sha256:1111", Names: []string{"mine:1"}}
	theirs := Image{ID: "sha256:abcd2" + strings.Repeat("0", 59), Manifest: "sha256:2222", Names: []string{"theirs:1"}}
	all := []Image{mine, theirs}
	may := func(i Image) bool { return i.ID == mine.ID }
	for _, tc := range []struct {
		ref  string
		want string // the ID found; "" for not found
	}{
		{"mine:1", mine.ID},
		{"mine", ""},      // no :latest
		{"abcd", mine.ID}, // a prefix both share, counting mine alone
		{"sha256:abcd", mine.ID},
		{theirs.ID, ""},
		{"theirs:1", ""},
		{"theirs", ""},
		{"abcd2", ""},
		{"sha256:2222", ""},
		{"theirs:1@" + theirs.ID, ""},
		{"mine:1@" + theirs.ID, ""},
		{"nothing:1", ""},
	} {
		got, err := resolveAmong(all, tc.ref, may)
		if tc.want != "" {
			if err != nil || got.ID != tc.want {
				t.Errorf("%s: %s %v, want %s", tc.ref, got.ID, err, tc.want)
			}
			continue
		}
		var nf *NotFoundError
		if !errors.As(err, &nf) || !nf.Among || errs.Of(err) != errs.NotFound {
			t.Errorf("%s: %+v %v, want it not found among the caller's", tc.ref, got, err)
			continue
		}
		if got, want := strings.ReplaceAll(err.Error(), tc.ref, "REF"), (&NotFoundError{Ref: "REF", Among: true}).Error(); got != want {
			t.Errorf("%s: the answer is not a missing image's:\n%s\n%s", tc.ref, got, want)
		}
	}
	// Without the filter, the shared prefix is ambiguous: both are there.
	if _, err := resolve(all, "abcd"); !errors.As(err, new(*AmbiguousError)) {
		t.Fatalf("abcd among all: %v, want it ambiguous", err)
	}
}
