package locality

import (
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/reject"
)

const goodConfig = `{"type":"sandbox.locality-config/1","anchors":[{"key":"ed25519:3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c","position":{"lat_udeg":48856600,"lon_udeg":2352200},"url":"http://10.0.0.1:8080"}],"regions":{"eu-west":{"centre":{"lat_udeg":48856600,"lon_udeg":2352200},"radius_m":1000000}}}`

// TestParseConfig: a configuration is read whole or refused, naming what.
func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Published()) != 1 || strings.Join(c.RegionNames(), ",") != "eu-west" {
		t.Fatalf("%+v", c)
	}
	for _, bad := range []string{
		`{}`, `[`, goodConfig + `{}`,
		strings.Replace(goodConfig, `locality-config/1`, `locality-config/2`, 1),
		strings.Replace(goodConfig, `"url":"http://10.0.0.1:8080"`, `"url":"ftp://x"`, 1),
		strings.Replace(goodConfig, `"eu-west"`, `"EU West"`, 1),
		strings.Replace(goodConfig, `"radius_m":1000000`, `"radius_m":0`, 1),
		strings.Replace(goodConfig, `"lat_udeg":48856600,"lon_udeg":2352200},"url"`, `"lat_udeg":98856600,"lon_udeg":2352200},"url"`, 1),
		strings.Replace(goodConfig, `"regions"`, `"zones"`, 1),
		`{"type":"sandbox.locality-config/1","anchors":[],"regions":{}}`,
	} {
		if _, err := ParseConfig([]byte(bad)); reject.CodeOf(err) == "" {
			t.Errorf("%s: %v", bad, err)
		}
	}
	dup := strings.Replace(goodConfig, `"anchors":[`, `"anchors":[{"key":"ed25519:3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c","position":{"lat_udeg":0,"lon_udeg":0},"url":"http://10.0.0.2"},`, 1)
	if _, err := ParseConfig([]byte(dup)); reject.CodeOf(err) != reject.DuplicateKey {
		t.Errorf("an anchor twice: %v", err)
	}
}

// FuzzParseConfig: any bytes are a configuration or a coded refusal,
// never a panic.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseConfig(b); err != nil && reject.CodeOf(err) == "" {
			t.Fatalf("a refusal without a code: %v", err)
		}
	})
}
