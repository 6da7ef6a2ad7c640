fn main() {
    std::process::exit(exactly::cli::main());
}
