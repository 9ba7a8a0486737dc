package main

import "flag"

// parsePermuted parses args as getopt does for rdma-core's tools: flags
// may come after the positional arguments, which it returns. On a usage
// error or -h it returns ok false and the exit code.
func parsePermuted(fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		if fs.NArg() == 0 {
			return pos, exitOK, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// intFlag defines an int flag under a short and a long name, as getopt_long
// tools have them.
func intFlag(fs *flag.FlagSet, p *int, short, long string, def int, usage string) {
	fs.IntVar(p, short, def, usage)
	fs.IntVar(p, long, def, "same as -"+short)
}
