package locality

import (
	"math"

	"github.com/opensubstrate/sandbox/reject"
)

// Constants of the rule (docs/spec/locality.md §4). Changing any of them is
// a new version of the claim.
const (
	// EarthRadiusM is the radius, in metres, of the sphere distances are
	// measured on: the IUGG mean radius R1, 6371.0088 km.
	EarthRadiusM = 6371008.8
	// SpeedOfLightMPS is c in a vacuum, in metres per second: the fastest
	// any signal between an anchor and a host can travel.
	SpeedOfLightMPS = 299792458
	// ShapeMarginPercent widens every great-circle distance to cover the
	// difference between the sphere and the Earth's ellipsoid (at most
	// about 0.5 %).
	ShapeMarginPercent = 1
	// MaxRTT is the largest round trip a measurement may record, in
	// microseconds (60 s): beyond it a bound says nothing on Earth.
	MaxRTT = 60_000_000
	// MaxRadiusM is the largest region radius, in metres: a radius that
	// reaches the antipode (half the sphere's circumference, rounded up)
	// covers the whole sphere.
	MaxRadiusM = 20_015_115
)

// Position is a point on the Earth in integer micro-degrees (WGS 84
// latitude and longitude × 10⁶): Lat in [-90 000 000, 90 000 000], Lon in
// [-180 000 000, 180 000 000].
type Position struct {
	Lat int64 `json:"lat_udeg"`
	Lon int64 `json:"lon_udeg"`
}

// check refuses a position outside its ranges.
func (p Position) check(where string) error {
	if p.Lat < -90_000_000 || p.Lat > 90_000_000 {
		return reject.New(reject.Invalid, where+".lat_udeg", "%d is outside [-90000000, 90000000]", p.Lat)
	}
	if p.Lon < -180_000_000 || p.Lon > 180_000_000 {
		return reject.New(reject.Invalid, where+".lon_udeg", "%d is outside [-180000000, 180000000]", p.Lon)
	}
	return nil
}

// Region is a disk on the Earth: every point whose great-circle distance
// from Centre is at most RadiusM metres.
type Region struct {
	Centre  Position `json:"centre"`
	RadiusM int64    `json:"radius_m"`
}

// check refuses a region outside its ranges.
func (r Region) check(where string) error {
	if err := r.Centre.check(where + ".centre"); err != nil {
		return err
	}
	if r.RadiusM < 1 || r.RadiusM > MaxRadiusM {
		return reject.New(reject.Invalid, where+".radius_m", "%d is outside [1, %d]", r.RadiusM, MaxRadiusM)
	}
	return nil
}

// pi is π rounded to binary64, a variable so that the division below is
// done in binary64 as the spec says, not folded from the exact constant.
var pi = math.Pi

// radPerMicrodegree is binary64(π) / 180 000 000, rounded once.
var radPerMicrodegree = pi / 180_000_000

// radians converts micro-degrees to radians, rounded once.
func radians(udeg int64) float64 {
	return float64(float64(udeg) * radPerMicrodegree)
}

// GreatCircleM is the haversine distance between a and b on the sphere of
// radius EarthRadiusM, in metres, rounded up to a whole metre. The order
// of operations is the spec's (§4.1), each product rounded on its own (the
// float64 conversions forbid fused multiply-adds), so that another binary64
// implementation gets the same metres unless the exact distance lies
// within a few nanometres of a whole metre.
func GreatCircleM(a, b Position) int64 {
	p1, p2 := radians(a.Lat), radians(b.Lat)
	dp := float64(p2 - p1)
	dl := float64(radians(b.Lon) - radians(a.Lon))
	s1 := math.Sin(float64(dp / 2))
	s2 := math.Sin(float64(dl / 2))
	h := float64(float64(s1*s1) + float64(float64(math.Cos(p1)*math.Cos(p2))*float64(s2*s2)))
	if h > 1 {
		h = 1
	}
	if h < 0 {
		h = 0
	}
	d := float64(float64(2*EarthRadiusM) * math.Asin(math.Sqrt(h)))
	return int64(math.Ceil(d))
}

// DistanceM is the distance the rule uses between a and b: GreatCircleM
// widened by ShapeMarginPercent, rounded up, in metres.
func DistanceM(a, b Position) int64 {
	g := GreatCircleM(a, b)
	return g + (g*ShapeMarginPercent+99)/100
}

// BoundM is the farthest, in metres, a host can be from an anchor that saw
// a round trip of rttMicros microseconds: half the round trip at the speed
// of light, rounded up. rttMicros is clamped to [0, MaxRTT].
func BoundM(rttMicros int64) int64 {
	rttMicros = min(max(rttMicros, 0), MaxRTT)
	return (rttMicros*SpeedOfLightMPS + 1_999_999) / 2_000_000
}
