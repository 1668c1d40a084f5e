//go:build !linux

package store

// sync makes the named files in the syncer's directory (and its
// entries) durable, one fsync each and one of the directory (where
// there is no syncfs), and says how many sync calls it made.
func (s *Syncer) sync(names []string) (int, error) { return s.each(names) }
