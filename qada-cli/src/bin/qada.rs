//! `qada`: the same command under its short name.

fn main() {
    qada_cli::main()
}
