use cellar::Entity;

#[derive(Entity)]
#[cellar(table = "t")]
struct Metric {
    #[cellar(key, uid = "metrics")]
    metric: String,
    #[cellar(key, uid(kind = "hosts", width = 9))]
    host: String,
    #[cellar(key, uid = "ids")]
    id: u64,
    #[cellar(key, desc, uid = "tags")]
    tag: String,
    #[cellar(key, uid(width = 4))]
    other: String,
    #[cellar(uid = "names")]
    name: String,
}

#[derive(Entity)]
#[cellar(table = "t", index(name = "by_value", on(value)))]
struct Indexed {
    #[cellar(key, uid = "metrics")]
    metric: String,
    value: u64,
}

fn main() {}
