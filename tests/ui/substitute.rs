use cellar::Entity;

#[derive(Entity)]
#[cellar(table = "t")]
struct Metric {
    #[cellar(key, substitute = "metrics")]
    metric: String,
    #[cellar(key, substitute(kind = "hosts", width = 9))]
    host: String,
    #[cellar(key, substitute = "ids")]
    id: u64,
    #[cellar(key, desc, substitute = "tags")]
    tag: String,
    #[cellar(key, substitute(width = 4))]
    other: String,
    #[cellar(substitute = "names")]
    name: String,
}

#[derive(Entity)]
#[cellar(table = "t", index(name = "by_value", on(value)))]
struct Indexed {
    #[cellar(key, substitute = "metrics")]
    metric: String,
    value: u64,
}

fn main() {}
