// Package energy is energy as a type: an integer count of microjoules, the
// way time.Duration is an integer count of nanoseconds.
//
// There are no float joules anywhere in the module's APIs or records: a
// receipt's totals must be exact sums of its readings, and float addition is
// not associative. Parse reads what people write ("5J", "250mJ", "1.5kJ",
// "2Wh") exactly, refusing anything finer than one microjoule.
package energy
