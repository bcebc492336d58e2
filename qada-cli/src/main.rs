//! `qada-cli`: the command as the design card names it (`qada-cli generate ...`).

fn main() {
    qada_cli::main()
}
