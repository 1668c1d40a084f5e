// Package drain takes what a pipe holds now, without waiting: the last
// words of a program that ended, read after the reader's deadline has
// passed (a busy machine ran the reader late), before the rest of the
// stream is cut or discarded.
package drain
